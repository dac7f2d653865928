# Koi against llama.cpp on K-quant files of a model Koi trains (issue 18, Must show 1):
# bench/peer-llamacpp/kquant_exactness trains kquant_char.yaml (300 steps), has llama.cpp
# (node-llama-cpp 3.21.1's libllama, npm package cached outside the tree) and Koi each quantize
# it to Q4_K_M, Q5_K_M and Q6_K, and requires identical greedy continuations (100 tokens, three
# prompts) from both engines on every file, llama.cpp with an f32 KV cache as Koi's. The
# engines' numbers differ in the last bits (float order of their K-quant dots and norms), so a
# near tie could part them on another CPU, where llama.cpp picks other kernels; on the
# development VM (AVX-512) every case is identical. Slow: training and 21 continuations take
# about 20 minutes on 2 loaded cores.
add_test(NAME kquant_exactness
         COMMAND ${CMAKE_SOURCE_DIR}/bench/peer-llamacpp/kquant_exactness 100)
set_tests_properties(kquant_exactness PROPERTIES LABELS slow TIMEOUT 3600
                     ENVIRONMENT "KOI=$<TARGET_FILE:koi>")
