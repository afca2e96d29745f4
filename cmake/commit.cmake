# commit.cmake — write OUT (a header for `dormouse --version`) with the commit of the
# source tree SRC, "+modified" when tracked files differ from it; "unknown" outside git.
# The file is rewritten only when its text changes, so an unchanged tree rebuilds nothing.
execute_process(COMMAND git -C ${SRC} rev-parse --short HEAD OUTPUT_VARIABLE c
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR c STREQUAL "")
  set(c "unknown")
else()
  execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE st OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT st STREQUAL "")
    set(c "${c}+modified")
  endif()
endif()
set(text "#define DM_COMMIT \"${c}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
