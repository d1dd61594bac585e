# The Python extension's C sources, relative to client/python: the one list both its build
# (client/python/CMakeLists.txt) and the sanitized test build (tests/CMakeLists.txt) use.
set(GKV_PY_SOURCES src/module.c src/client_type.c src/client_values.c src/client_keys.c
  src/client_map.c src/client_watch.c src/mapping.c src/dlpack.c src/list_iter.c src/cuda.c
  src/client_buffer.c)
