# Component libraries whose layering the build enforces.
#
# Every header is included as "<component>/<header>.h", so a directory that
# holds the source tree's component folders side by side would let any code
# include any header. Instead each component gets two include trees, staged
# in the build tree at configure time (symbolic links into the sources, so
# diagnostics and editors still lead to the source files):
#
#   include/public/<component>/<component>/<header>   one link per public header;
#       the library's PUBLIC include directory, all its consumers see;
#   include/private/<component>/<component>          a link to the whole source
#       folder; the include directory of the component's own targets and of its
#       tests only.
#
# A header not named in PUBLIC_HEADERS is therefore invisible outside its
# component, and a component sees another's public headers only by linking it,
# so a lower component cannot include a higher one's. tests/layering checks both.

set(FORKTRIAL_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)

# forktrial_private_headers(TARGET FOLDER [PUBLIC]): TARGET includes every
# header of the source folder FOLDER (a component, tools, tests) under the
# spelling "FOLDER/header.h"; PUBLIC passes that on to what links TARGET (the
# test support library passes tests/ on to the tests).
function(forktrial_private_headers target folder)
  set(scope PRIVATE)
  if(ARGV2 STREQUAL "PUBLIC")
    set(scope PUBLIC)
  endif()
  set(tree ${FORKTRIAL_INCLUDE_ROOT}/private/${folder})
  set(linked "")
  if(IS_SYMLINK ${tree}/${folder})
    file(READ_SYMLINK ${tree}/${folder} linked)
  endif()
  if(NOT linked STREQUAL "${PROJECT_SOURCE_DIR}/${folder}")
    file(REMOVE_RECURSE ${tree})
    file(MAKE_DIRECTORY ${tree})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${tree}/${folder} SYMBOLIC)
  endif()
  # BEFORE: a component's own sources find its headers through the private
  # tree even where the public one would also have them.
  target_include_directories(${target} BEFORE ${scope} $<BUILD_INTERFACE:${tree}>)
endfunction()

# forktrial_public_headers(COMPONENT HEADER...): stages COMPONENT's public
# tree (stale links of headers no longer public are removed) and records the
# list for tests/layering. The component's libraries export it through
# forktrial_component_target.
function(forktrial_public_headers component)
  set(tree ${FORKTRIAL_INCLUDE_ROOT}/public/${component})
  file(REMOVE_RECURSE ${tree})
  file(MAKE_DIRECTORY ${tree}/${component})
  foreach(header ${ARGN})
    set(source ${PROJECT_SOURCE_DIR}/${component}/${header})
    if(NOT EXISTS ${source})
      message(FATAL_ERROR "${component} lists ${header} as a public header, but ${source} does "
                          "not exist")
    endif()
    file(CREATE_LINK ${source} ${tree}/${component}/${header} SYMBOLIC)
  endforeach()
  set_property(GLOBAL PROPERTY FORKTRIAL_PUBLIC_HEADERS_${component} ${ARGN})
endfunction()

# forktrial_component_target(TARGET COMPONENT): TARGET is built from
# COMPONENT's sources: it sees all of COMPONENT's headers, and, if it is a
# library, exports the public ones.
function(forktrial_component_target target component)
  forktrial_private_headers(${target} ${component})
  get_target_property(type ${target} TYPE)
  if(type MATCHES "LIBRARY$")
    target_include_directories(${target} PUBLIC
                               $<BUILD_INTERFACE:${FORKTRIAL_INCLUDE_ROOT}/public/${component}>)
  endif()
endfunction()

# forktrial_component(NAME [STATIC] PUBLIC_HEADERS header... SOURCES source...)
# adds the library forktrial_NAME (alias forktrial::NAME) built from the
# sources of the folder NAME, with the project's warning flags. Its consumers
# see the PUBLIC_HEADERS only; a header another component includes belongs
# there, as does one a public header includes. Link other components with
# target_link_libraries: PUBLIC where a public header includes theirs.
function(forktrial_component name)
  cmake_parse_arguments(C "STATIC" "" "PUBLIC_HEADERS;SOURCES" ${ARGN})
  if(C_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "forktrial_component(${name}): unknown arguments ${C_UNPARSED_ARGUMENTS}")
  endif()
  set(type)
  if(C_STATIC)
    set(type STATIC)
  endif()
  forktrial_public_headers(${name} ${C_PUBLIC_HEADERS})
  add_library(forktrial_${name} ${type} ${C_SOURCES})
  add_library(forktrial::${name} ALIAS forktrial_${name})
  forktrial_component_target(forktrial_${name} ${name})
  target_link_libraries(forktrial_${name} PRIVATE forktrial::flags)
  forktrial_quick_compile(forktrial_${name})
endfunction()
