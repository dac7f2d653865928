# Structured output (issue 19, Must show 3): 36 JSON schemas x 20 seeds of temperature-1
# sampling, plus regex, choice, GBNF, json_object and a streamed request, validated by
# python3-jsonschema. stories260K is quick; the TinyLlama-shape random model (1.1B
# parameters, 32000-token vocabulary) takes many minutes on 2 cores, so it is slow.
add_test(NAME structured_output_stories260k
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/structured_output.py $<TARGET_FILE:koi> ${KOI_SHARED_DIR}
                 stories260k)
set_tests_properties(structured_output_stories260k PROPERTIES LABELS integration TIMEOUT 300)
add_test(NAME structured_output_tinyllama
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/structured_output.py $<TARGET_FILE:koi> ${KOI_SHARED_DIR}
                 tinyllama 160)
set_tests_properties(structured_output_tinyllama PROPERTIES LABELS slow TIMEOUT 7200)
