# Helpers shared by every stage, exercise and test, so that each CMakeLists.txt stays a few lines.

# fa_find_python(): FA_PYTHON, a Python 3 that can import matplotlib if there is one (the plot
# tool needs it); otherwise any Python 3 (the tests' runner scripts need only the standard library).
function(fa_find_python)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(candidates)
  if(Python3_EXECUTABLE)
    list(APPEND candidates ${Python3_EXECUTABLE})
  endif()
  list(APPEND candidates /usr/bin/python3)
  set(chosen "")
  foreach(py IN LISTS candidates)
    if(EXISTS ${py})
      execute_process(COMMAND ${py} -c "import matplotlib" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
      if(rc EQUAL 0)
        set(chosen ${py})
        break()
      endif()
    endif()
  endforeach()
  set(FA_PLOTS_AVAILABLE ON)
  if(NOT chosen)
    set(FA_PLOTS_AVAILABLE OFF)
    list(GET candidates 0 chosen)
    if(NOT EXISTS ${chosen})
      message(FATAL_ERROR "Python 3 not found: install the Debian package python3")
    endif()
    message(STATUS "matplotlib not found for ${chosen}: the plots are left out (Debian package python3-matplotlib)")
  endif()
  set(FA_PYTHON ${chosen} CACHE FILEPATH "Python 3 for the plot tool and test runners")
  set(FA_PLOTS_AVAILABLE ${FA_PLOTS_AVAILABLE} PARENT_SCOPE)
endfunction()

# Warnings everywhere we own the code.
function(fa_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>
    # GCC 12 reports false -Wrestrict positives inside std::string concatenation (GCC bug 105329).
    $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr -lineinfo>)
endfunction()

# fa_add_doctest(NAME name SOURCES ... LIBS ... [LABELS ...] [GPU])
# A doctest executable registered as one CTest test. GPU tests carry the label `gpu` and report
# skipped (exit 77) on a machine without a CUDA device.
function(fa_add_doctest)
  cmake_parse_arguments(T "GPU" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  if(T_GPU)
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} fa_cuda_doctest_main)
  else()
    target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} fa_doctest_main)
  endif()
  fa_warnings(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set(labels ${T_LABELS})
  if(T_GPU)
    list(APPEND labels gpu)
    set_tests_properties(${T_NAME} PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
  else()
    list(APPEND labels cpu)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${labels}")
endfunction()

# fa_add_cli_test(NAME name EXPECT code COMMAND exe args... [JSON file] [GPU])
# Runs an executable through tools/run_and_check.py: checks its exit code, that an error is one
# line on stderr, and (with JSON) that the results file is well formed.
function(fa_add_cli_test)
  cmake_parse_arguments(T "GPU" "NAME;EXPECT;JSON;STAGE" "COMMAND" ${ARGN})
  set(args --expect ${T_EXPECT})
  if(T_JSON)
    list(APPEND args --json ${T_JSON})
  endif()
  if(T_STAGE)
    list(APPEND args --stage ${T_STAGE})
  endif()
  add_test(NAME ${T_NAME}
           COMMAND ${FA_PYTHON} ${PROJECT_SOURCE_DIR}/tools/run_and_check.py ${args} -- ${T_COMMAND})
  if(T_GPU)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "gpu;cli" SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
  else()
    set_tests_properties(${T_NAME} PROPERTIES LABELS "cpu;cli")
  endif()
endfunction()
