// The end of what GeneratedBegin.h silences (no include guard: once per model.h).
#if defined(__clang__)
#pragma clang diagnostic pop
#elif defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
