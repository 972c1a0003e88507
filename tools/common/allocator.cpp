#include "common/allocator.h"

#include <dlfcn.h>

#ifdef HPCNN_WITH_TCMALLOC
#include <gperftools/tcmalloc.h>
#endif

namespace hpcnn::tool {

std::string allocator_name() {
#ifdef HPCNN_WITH_TCMALLOC
  int major = 0, minor = 0;
  const char* patch = nullptr;
  tc_version(&major, &minor, &patch);  // also keeps the library in the executable's needed list
  const std::string name = "tcmalloc " + std::to_string(major) + "." + std::to_string(minor) + (patch ? patch : "");
  // The malloc the process calls is the first one in the global lookup order: tcmalloc's unless an
  // allocator was preloaded (or the link order put the C library first).
  if (dlsym(RTLD_DEFAULT, "malloc") != reinterpret_cast<void*>(&tc_malloc)) return "another malloc than the linked " + name;
  return name;
#else
  return "glibc malloc";
#endif
}

}  // namespace hpcnn::tool
