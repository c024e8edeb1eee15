# Helpers shared by every stage, exercise and test, so that each CMakeLists.txt stays a few lines.

# fa_find_python(): FA_PYTHON, a Python 3 that can import matplotlib if there is one (the plot
# tool needs it); otherwise any Python 3 (the tests' runner scripts need only the standard library).
function(fa_find_python)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(candidates)
  # A Python given or chosen before comes first, but is kept only while it still qualifies: once
  # matplotlib is installed for another Python, a later configure moves to that one (the cache alone
  # would keep the first choice forever, and the plot tests would run a Python without matplotlib).
  if(DEFINED CACHE{FA_PYTHON} AND EXISTS "${FA_PYTHON}")
    list(APPEND candidates ${FA_PYTHON})
  endif()
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
  set(FA_PYTHON ${chosen} CACHE FILEPATH "Python 3 for the plot tool and test runners" FORCE)
  set(FA_PLOTS_AVAILABLE ${FA_PLOTS_AVAILABLE} PARENT_SCOPE)
endfunction()

# Warnings everywhere we own the code.
function(fa_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow>
    # GCC 12 reports false -Wrestrict positives inside std::string concatenation (GCC bug 105329).
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall --expt-relaxed-constexpr -lineinfo>)
endfunction()

# fa_gpu_stage(ARCHS arch... MIN_CC major.minor)
# Called at the top of a GPU stage's (or exercise's) CMakeLists.txt, before its targets: every
# target that folder creates afterwards builds for ARCHS (e.g. 80 90, or 90a for a stage that
# needs Hopper's wgmma/TMA) and sees FA_MIN_COMPUTE_CAPABILITY=<major*10+minor> (8.0 → 80), the
# device the stage needs at run time (fa/cuda/stage_arch.cuh; without it the executable exits 77),
# raised to the oldest architecture it builds for when that is newer (see below).
# A -DCMAKE_CUDA_ARCHITECTURES given by the user (FA_CUDA_ARCHITECTURES_USER, top-level
# CMakeLists.txt) narrows ARCHS to the architectures it names, by number: a user's 90 keeps a
# stage's 90a. native, all, all-major and OFF keep ARCHS; a list that names none of ARCHS keeps
# them too, with one message, since the stage cannot build for what the user asked.
# It sets CMAKE_CUDA_ARCHITECTURES in the caller's scope: the default of each new target's
# CUDA_ARCHITECTURES, so it stops at the folder and does not reach the stage added next.
function(fa_gpu_stage)
  cmake_parse_arguments(G "" "MIN_CC" "ARCHS" ${ARGN})
  if(NOT G_ARCHS OR NOT G_MIN_CC OR G_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "fa_gpu_stage: usage fa_gpu_stage(ARCHS 80 90 MIN_CC 8.0), got (${ARGN})")
  endif()
  if(NOT G_MIN_CC MATCHES "^([0-9]+)\\.([0-9])$")
    message(FATAL_ERROR "fa_gpu_stage: MIN_CC ${G_MIN_CC} is not major.minor (e.g. 8.0)")
  endif()
  math(EXPR min_cc "${CMAKE_MATCH_1} * 10 + ${CMAKE_MATCH_2}")
  foreach(arch IN LISTS G_ARCHS)
    if(NOT arch MATCHES "^[0-9]+[af]?(-real|-virtual)?$")
      message(FATAL_ERROR "fa_gpu_stage: ${arch} is not a CUDA architecture (e.g. 80, 90a, 90-real)")
    endif()
  endforeach()

  set(archs ${G_ARCHS})
  set(user ${FA_CUDA_ARCHITECTURES_USER})
  if(user AND NOT user MATCHES "^(native|all|all-major|OFF)$")
    # Compared by number: 90a, 90-real, 90a-virtual → 90.
    set(user_numbers)
    foreach(arch IN LISTS user)
      string(REGEX MATCH "^[0-9]+" number "${arch}")
      list(APPEND user_numbers ${number})
    endforeach()
    set(narrowed)
    foreach(arch IN LISTS G_ARCHS)
      string(REGEX MATCH "^[0-9]+" number "${arch}")
      if(number IN_LIST user_numbers)
        list(APPEND narrowed ${arch})
      endif()
    endforeach()
    if(narrowed)
      set(archs ${narrowed})
    else()
      file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
      message(STATUS "${folder}: needs CUDA architectures ${G_ARCHS}, none of CMAKE_CUDA_ARCHITECTURES=${user}: builds for ${G_ARCHS}")
    endif()
  endif()

  # A device older than the oldest architecture built cannot run the stage either (no kernel
  # image for it; PTX only compiles forward): that raises the run-time minimum, to 9.0 under
  # -DCMAKE_CUDA_ARCHITECTURES=90, so that an A100 skips with the reason rather than fails.
  set(oldest)
  foreach(arch IN LISTS archs)
    string(REGEX MATCH "^[0-9]+" number "${arch}")
    if(NOT oldest OR number LESS oldest)
      set(oldest ${number})
    endif()
  endforeach()
  if(oldest GREATER min_cc)
    set(min_cc ${oldest})
  endif()
  set(CMAKE_CUDA_ARCHITECTURES ${archs} PARENT_SCOPE)
  add_compile_definitions(FA_MIN_COMPUTE_CAPABILITY=${min_cc})  # the caller's folder (a directory property)
  # For the configure summary (fa_report_gpu_architectures): a stage's number and what it builds.
  if(CMAKE_CURRENT_SOURCE_DIR MATCHES "/steps/([0-9][0-9])_[^/]*$")
    string(REPLACE ";" " " archs_words "${archs}")
    set_property(GLOBAL APPEND PROPERTY FA_GPU_STAGE_ARCHITECTURES "${CMAKE_MATCH_1}=${archs_words}")
  endif()
endfunction()

# fa_report_gpu_architectures(): one configure line with the architectures each GPU stage builds
# for, stages that build the same grouped, e.g. "75 80 90 (stages 03 04 05 06), 90a (stage 09)".
# ./course prints this line after configuring.
function(fa_report_gpu_architectures)
  get_property(records GLOBAL PROPERTY FA_GPU_STAGE_ARCHITECTURES)
  list(SORT records)  # by stage number, whatever order the folders were added in
  set(groups)  # distinct architecture lists, in stage order of first appearance
  foreach(record IN LISTS records)
    string(REGEX REPLACE "^[0-9]+=" "" archs "${record}")
    string(MAKE_C_IDENTIFIER "${archs}" key)
    if(NOT archs IN_LIST groups)
      list(APPEND groups "${archs}")
    endif()
    string(REGEX MATCH "^[0-9]+" stage "${record}")
    list(APPEND stages_${key} ${stage})
  endforeach()
  set(parts)
  foreach(archs IN LISTS groups)
    string(MAKE_C_IDENTIFIER "${archs}" key)
    list(REMOVE_DUPLICATES stages_${key})
    list(LENGTH stages_${key} count)
    string(REPLACE ";" " " numbers "${stages_${key}}")
    if(count EQUAL 1)
      list(APPEND parts "${archs} (stage ${numbers})")
    else()
      list(APPEND parts "${archs} (stages ${numbers})")
    endif()
  endforeach()
  list(JOIN parts ", " summary)
  message(STATUS "CUDA ${CMAKE_CUDA_COMPILER_VERSION}: GPU stages build for architectures ${summary}")
endfunction()

# fa_no_cp_async_twin(lib [LIBS libs...])
# Called after a GPU stage's library `lib`: `lib`_no_cp_async, built from the same sources with the
# same include directories, with FA_PTX_NO_CP_ASYNC defined (public: what links it is built so
# too), which forces cp.async's synchronous fallback (fa/cuda/ptx/cp_async.cuh) on every
# architecture. It is the code that runs on Turing (sm_75, no cp.async), built here for whatever
# the folder builds, so that a stage's tests run it on an Ampere or Hopper GPU too (the stage's
# test_stepNN_no_cp_async). LIBS: what it links, the twins of `lib`'s own stage libraries.
function(fa_no_cp_async_twin lib)
  cmake_parse_arguments(T "" "" "LIBS" ${ARGN})
  get_target_property(sources ${lib} SOURCES)
  get_target_property(dir ${lib} SOURCE_DIR)
  set(absolute)
  foreach(source IN LISTS sources)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${dir})
    list(APPEND absolute ${source})
  endforeach()
  set(twin ${lib}_no_cp_async)
  add_library(${twin} STATIC ${absolute})
  foreach(property INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES)
    get_target_property(value ${lib} ${property})
    if(value)
      set_property(TARGET ${twin} PROPERTY ${property} ${value})
    endif()
  endforeach()
  target_link_libraries(${twin} PUBLIC ${T_LIBS})
  target_compile_definitions(${twin} PUBLIC FA_PTX_NO_CP_ASYNC=1)
  fa_warnings(${twin})
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

# fa_add_cli_test(NAME name EXPECT code COMMAND exe args... [JSON file] [STAGE id] [MODE mode]
#                 [NPY_SHAPE B,H,NQ,NK,D] [REQUIRE text...] [FORBID text...] [GPU])
# Runs an executable through tools/run_and_check.py: checks its exit code, that an error is one
# line on stderr, and (with JSON) that the results file is well formed. MODE (see the script's
# --help): run (default); npy-roundtrip (writes q/k/v .npy, runs with --load/--save and checks
# o.npy and lse.npy against a float64 attention in Python); bad-npy (--load of a malformed file);
# nan-npy (--load of a q.npy holding a NaN). REQUIRE/FORBID: texts the output must (not) hold.
function(fa_add_cli_test)
  cmake_parse_arguments(T "GPU" "NAME;EXPECT;JSON;STAGE;MODE;NPY_SHAPE" "COMMAND;REQUIRE;FORBID" ${ARGN})
  set(args --expect ${T_EXPECT})
  foreach(text IN LISTS T_REQUIRE)
    list(APPEND args --require ${text})
  endforeach()
  foreach(text IN LISTS T_FORBID)
    list(APPEND args --forbid ${text})
  endforeach()
  if(T_JSON)
    list(APPEND args --json ${T_JSON})
  endif()
  if(T_STAGE)
    list(APPEND args --stage ${T_STAGE})
  endif()
  if(T_MODE)
    list(APPEND args --mode ${T_MODE})
  endif()
  if(T_NPY_SHAPE)
    list(APPEND args --npy-shape ${T_NPY_SHAPE})
  endif()
  add_test(NAME ${T_NAME}
           COMMAND ${FA_PYTHON} ${PROJECT_SOURCE_DIR}/tools/run_and_check.py ${args} -- ${T_COMMAND})
  if(T_GPU)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "gpu;cli" SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
  else()
    set_tests_properties(${T_NAME} PROPERTIES LABELS "cpu;cli")
  endif()
endfunction()

# fa_add_stage_cli_tests(exe STAGE id [GPU] [RUN_ARGS args...] [NPY_SHAPE B,H,NQ,NK,D or B,H,HKV,NQ,NK,D])
# The command-line tests that every stage executable gets: a short verified run with --json, an
# unknown flag (exit 2, one line), --load of a malformed .npy (exit 2, one line), a causal
# --load/--save round trip checked against attention computed in Python, and --help.
# RUN_ARGS replaces the short run's arguments; NPY_SHAPE the round trip's shape (default
# 1,2,6,4,8: Nq > Nk, so that the first causal rows see no key).
function(fa_add_stage_cli_tests exe)
  cmake_parse_arguments(T "GPU" "STAGE;NPY_SHAPE" "RUN_ARGS" ${ARGN})
  if(NOT T_RUN_ARGS)
    set(T_RUN_ARGS --sweep 1,77,130 --heads 2 --reps 1 --warmup 0)
  endif()
  set(gpu)
  if(T_GPU)
    set(gpu GPU)
  endif()
  set(json ${CMAKE_CURRENT_BINARY_DIR}/${exe}_cli.json)
  fa_add_cli_test(NAME ${exe}_cli_json EXPECT 0 JSON ${json} STAGE ${T_STAGE} ${gpu}
                  COMMAND $<TARGET_FILE:${exe}> ${T_RUN_ARGS} --json ${json})
  fa_add_cli_test(NAME ${exe}_cli_bogus EXPECT 2 ${gpu} COMMAND $<TARGET_FILE:${exe}> --bogus)
  fa_add_cli_test(NAME ${exe}_cli_bad_npy EXPECT 2 MODE bad-npy ${gpu} COMMAND $<TARGET_FILE:${exe}>)
  set(shape)
  if(T_NPY_SHAPE)
    set(shape NPY_SHAPE ${T_NPY_SHAPE})
  endif()
  fa_add_cli_test(NAME ${exe}_cli_npy_roundtrip EXPECT 0 MODE npy-roundtrip STAGE ${T_STAGE} ${shape} ${gpu}
                  COMMAND $<TARGET_FILE:${exe}> --causal)
  fa_add_cli_test(NAME ${exe}_cli_help EXPECT 0 ${gpu} COMMAND $<TARGET_FILE:${exe}> --help)

  # Inputs that must end in one clear line and exit 2 (or `oom` rows), never a crash or a PASS:
  # sizes past 64 bits, a NaN in a loaded file, scores past float32's range, an output file that
  # cannot be written (refused before the run), and a case whose host tensors do not fit.
  fa_add_cli_test(NAME ${exe}_cli_size_overflow EXPECT 2 ${gpu} REQUIRE "64-bit"
                  COMMAND $<TARGET_FILE:${exe}> --batch 16M --heads 1M --seq 1M --dim 32)
  fa_add_cli_test(NAME ${exe}_cli_nan_npy EXPECT 2 MODE nan-npy ${gpu} COMMAND $<TARGET_FILE:${exe}>)
  fa_add_cli_test(NAME ${exe}_cli_score_overflow EXPECT 2 ${gpu} REQUIRE "overflows float32"
                  COMMAND $<TARGET_FILE:${exe}> --seq 64 --heads 1 --scale 1e38)
  fa_add_cli_test(NAME ${exe}_cli_json_unwritable EXPECT 2 ${gpu} FORBID "-- case 1"
                  COMMAND $<TARGET_FILE:${exe}> --seq 64 --json /proc/version/results.json)
  fa_add_cli_test(NAME ${exe}_cli_all_oom EXPECT 1 ${gpu} REQUIRE "nothing ran" FORBID "PASS:"
                  COMMAND $<TARGET_FILE:${exe}> --batch 64 --heads 64 --seq 1M --dim 64 --reps 1 --warmup 0)
  # Hostile inputs (common/tests/hostile_cli.py --list names them): FIFOs and devices where a file
  # is read or written, empty and out-of-range flag values, a scale float32 cannot hold, values
  # past float32's range with --no-verify, control bytes in values and in cu_seqlens.txt, .npy
  # shapes with a bool or a zero: each one line and exit 2, none a hang.
  set(hostile_shape 1,2,6,4,8)
  if(T_NPY_SHAPE)
    set(hostile_shape ${T_NPY_SHAPE})
  endif()
  add_test(NAME ${exe}_cli_hostile
           COMMAND ${FA_PYTHON} ${PROJECT_SOURCE_DIR}/common/tests/hostile_cli.py --shape ${hostile_shape}
                   -- $<TARGET_FILE:${exe}>)
  if(T_GPU)
    set_tests_properties(${exe}_cli_hostile PROPERTIES LABELS "gpu;cli" SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu TIMEOUT 900)
  else()
    set_tests_properties(${exe}_cli_hostile PROPERTIES LABELS "cpu;cli" TIMEOUT 300)
  endif()
  # Large logits, large scales and large head dims are ordinary inputs: a correct stage passes.
  fa_add_cli_test(NAME ${exe}_cli_large_scale EXPECT 0 ${gpu} FORBID "FAIL"
                  COMMAND $<TARGET_FILE:${exe}> --seq 200 --heads 2 --scale 100 --causal --reps 1 --warmup 0)
  fa_add_cli_test(NAME ${exe}_cli_large_logits EXPECT 0 ${gpu} FORBID "FAIL"
                  COMMAND $<TARGET_FILE:${exe}> --sweep 77,256 --heads 2 --inputs large-logits --reps 1 --warmup 0)
endfunction()

# fa_add_exercise(ID exNN NAME target SOURCES files... [LIBS libs...] [GPU])
# One exercise, called once, from exercises/NN_name/CMakeLists.txt (solutions/ has no CMake file).
# A hole is a small header that the stage's own code includes with angle brackets: one of
# steps/NN_name/holes/ (#include <backward_tile.cuh>), or a header of common/ that the stage
# taught (#include <fa/cuda/tc/fragment_softmax.cuh>). SOURCES are the stage's own sources that
# include the holes (${PROJECT_SOURCE_DIR}/steps/...) and the exercise's checks; they are built
# twice, each time with one folder first on the include path, so that its holes replace the stage's:
#   `target`           the starter: exercises/NN_name/ first. `check_exNN` builds it and runs its
#                      checks, the learner's one command. Not a CTest test: a starter fails by
#                      design, and tools/course_check.py proves that it does.
#   `target_solution`  the solution: solutions/NN_name/ first (it holds only the filled holes,
#                      each equal to the stage's file). Registered in CTest (labels exercise;cpu or
#                      exercise;gpu), and `check_exNN_solution` runs it.
# The checks include a hole with angle brackets too: a quoted include would find the starter's file
# next to the checks, even in the solution's build.
# Both link fa_exercise_main (one line per check, the next TODO at the end), or with GPU
# fa_cuda_exercise_main (whose main exits 77 without a device: CTest reports the test skipped).
# Each target also writes <build>/course/<target>.<role>.json, which tells tools/course_check.py
# what to run, and joins the global property FA_EXERCISE_TARGETS.
function(fa_add_exercise)
  cmake_parse_arguments(E "GPU" "ID;NAME" "SOURCES;LIBS" ${ARGN})
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  if(NOT folder MATCHES "^exercises/([0-9][0-9]_[A-Za-z0-9_]+)$")
    message(FATAL_ERROR "fa_add_exercise(${E_NAME}): call it from exercises/NN_name, not ${folder}")
  endif()
  set(name ${CMAKE_MATCH_1})
  if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/solutions/${name})
    message(FATAL_ERROR "fa_add_exercise(${E_NAME}): solutions/${name} is missing")
  endif()
  if(E_GPU)
    if(NOT TARGET fa_cuda_exercise_main)
      message(FATAL_ERROR "fa_add_exercise(${E_NAME} GPU): fa_cuda_exercise_main is not defined (common/cuda; build the GPU exercises only when FA_HAVE_CUDA)")
    endif()
    set(main fa_cuda_exercise_main)
    set(device gpu)
    set(gpu_json true)
  else()
    set(main fa_exercise_main)
    set(device cpu)
    set(gpu_json false)
  endif()
  set(sources)
  foreach(source IN LISTS E_SOURCES)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    list(APPEND sources ${source})
  endforeach()

  foreach(role starter solution)
    if(role STREQUAL "starter")
      set(tree exercises)
      set(target ${E_NAME})
      set(check check_${E_ID})
    else()
      set(tree solutions)
      set(target ${E_NAME}_solution)
      set(check check_${E_ID}_solution)
    endif()
    add_executable(${target} ${sources})
    # BEFORE: ahead of every include folder the libraries bring, common/'s included.
    target_include_directories(${target} BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/${tree}/${name})
    # The stages' public headers, by folder ("01_cpu_attention/attention.hpp"), as the stages have.
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/steps)
    target_link_libraries(${target} PRIVATE ${E_LIBS} ${main})
    fa_warnings(${target})
    if(role STREQUAL "starter")
      # A hole (FA_TODO) leaves parameters and locals unused until the learner fills it in: quiet
      # the host compiler and nvcc's front end about it (177: declared but never referenced,
      # 550: set but never used).
      target_compile_options(${target} PRIVATE
        $<$<COMPILE_LANGUAGE:CXX>:-Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable>
        $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wno-unused-parameter,-Wno-unused-variable,-Wno-unused-but-set-variable>
        $<$<COMPILE_LANGUAGE:CUDA>:-diag-suppress=177,550>)
    else()
      add_test(NAME ${target} COMMAND ${target})
      set_tests_properties(${target} PROPERTIES LABELS "exercise;${device}")
      if(E_GPU)
        set_tests_properties(${target} PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK gpu)
      endif()
    endif()
    set_property(GLOBAL APPEND PROPERTY FA_EXERCISE_TARGETS ${target})
    add_custom_target(${check} COMMAND ${target} USES_TERMINAL
                      COMMENT "${E_ID}: the checks against ${tree}/${name} (${role})")
    add_dependencies(${check} ${target})
    file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/course/${target}.${role}.json CONTENT
"{\"id\": \"${E_ID}\", \"role\": \"${role}\", \"target\": \"${target}\", \"folder\": \"${tree}/${name}\", \"gpu\": ${gpu_json}, \"exe\": \"$<TARGET_FILE:${target}>\"}
")
  endforeach()
endfunction()
