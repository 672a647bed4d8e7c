"""C library calls for kernels, bound by name when a kernel is compiled (importing this
module imports numba: kernels name it through core.jit.numba_name)."""

from numba import types

# ssize_t pread(int fd, void *buffer, size_t count, off_t offset): the buffer as an
# address (a kernel has it from array.ctypes.data), the same bits on 64-bit systems
pread = types.ExternalFunction("pread", types.intp(types.intc, types.uintp, types.uintp, types.int64))
