# The fuzz targets: fuzz/<name>.cpp each, seeds in fuzz/corpus/<name>/, crashes kept in
# fuzz/regressions/<name>/. Shared by the replay tests (fuzz/CMakeLists.txt) and the
# libFuzzer build (fuzz/libfuzzer/CMakeLists.txt, scripts/fuzz.sh).
set(TAHUA_FUZZ_TARGETS
  http_head
  request_inspect
  sse_parser
  event_stream
  translate_request
  translate_stream
  translate_response
  config_loader
  trace_context
  stored_state
  guardrail_stream
  chat_event_texts
  multipart
  jwt
)
