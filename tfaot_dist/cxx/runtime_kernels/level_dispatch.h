// Choosing a kernel of the best level among those built: the dispatchers' common part.
//
// A kernel exists once per level the build compiled (TFAOT_TOP_LEVEL, the highest); its names are
// those of the level's object (the entry name with the level's suffix). TFAOT_BUILT_V3/V4 name a
// level's kernel only where that level was built: a kernel of a level not built is declared but
// never referred to, so nothing asks the linker for it.
#ifndef TFAOT_RUNTIME_KERNELS_LEVEL_DISPATCH_H_
#define TFAOT_RUNTIME_KERNELS_LEVEL_DISPATCH_H_

#include "cpu_level.h"

#ifndef TFAOT_TOP_LEVEL
#error "TFAOT_TOP_LEVEL (the highest level built) must be defined by the build"
#endif
#if TFAOT_TOP_LEVEL >= 3
#define TFAOT_BUILT_V3(kernel) kernel
#else
#define TFAOT_BUILT_V3(kernel) nullptr
#endif
#if TFAOT_TOP_LEVEL >= 4
#define TFAOT_BUILT_V4(kernel) kernel
#else
#define TFAOT_BUILT_V4(kernel) nullptr
#endif

namespace tfaot_runtime {

// The kernel cpu_level() asks for; a level not built is nullptr here and never asked for, as
// cpu_level() never answers above the highest level built.
template <typename Kernel>
inline Kernel* by_level(Kernel* baseline, Kernel* v3, Kernel* v4) {
  switch (cpu_level()) {
    case kV4:
      return v4 != nullptr ? v4 : (v3 != nullptr ? v3 : baseline);
    case kV3:
      return v3 != nullptr ? v3 : baseline;
    default:
      return baseline;
  }
}

}  // namespace tfaot_runtime

#endif  // TFAOT_RUNTIME_KERNELS_LEVEL_DISPATCH_H_
