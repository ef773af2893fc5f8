// The x86-64 level (psABI micro-architecture level) the runtime's matrix kernels use.
//
// Each kernel exists once per level, compiled with -march=<level>; the
// dispatcher asks cpu_level() which to call. The level is the best this CPU
// runs, unless the environment variable TFAOT_CPU_LEVEL or
// tfaot_runtime_force_cpu_level() asks for a lower one (to reproduce a result,
// or to test the baseline code on a newer CPU). A request above what the CPU
// runs is lowered to what it runs: the runtime never executes an instruction
// the CPU lacks.
#ifndef TFAOT_RUNTIME_KERNELS_CPU_LEVEL_H_
#define TFAOT_RUNTIME_KERNELS_CPU_LEVEL_H_

namespace tfaot_runtime {

// The levels, ordered; their names are the -march / LLVM CPU names.
enum CpuLevel { kBaseline = 1, kV3 = 3, kV4 = 4 };

// The level the kernels use now (decided at the first call).
CpuLevel cpu_level();

}  // namespace tfaot_runtime

extern "C" {
// Ask for a level by name ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4");
// nullptr or "" returns to the environment's choice (TFAOT_CPU_LEVEL, else
// automatic). Returns 0 if the kernels of that level are now in use, 1 if the
// request was lowered to what this CPU and this runtime have (v2 always is:
// there are no v2 kernels), -1 for an unknown name (nothing changes).
int tfaot_runtime_force_cpu_level(const char* level);

// The name of the level the kernels use now.
const char* tfaot_runtime_cpu_level(void);
}

#endif  // TFAOT_RUNTIME_KERNELS_CPU_LEVEL_H_
