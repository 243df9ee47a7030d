# collective_warnings(target): the project's warning set, as errors unless
# COLLECTIVE_WERROR is off. Applied to our own targets only, never to
# generated or third-party code. (-Wmissing-field-initializers is off because
# it fires on designated initializers that rely on member defaults.)
function(collective_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wcast-align -Wunused
      -Wimplicit-fallthrough -Wformat=2 -Wno-missing-field-initializers>
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual -Wold-style-cast>)
  if(COLLECTIVE_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C,CXX>:-Werror>)
  endif()
endfunction()
