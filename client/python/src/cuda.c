/* cuda.c: the CUDA runtime calls of the device paths (synchronising before a seal or a copy);
 * in a build without CUDA each raises NotSupported. */
#include "module.h"

#ifdef GKV_HAVE_CUDA
#include <cuda_runtime.h>

static int raise_cuda(cudaError_t e)
{
    char msg[200];
    PyOS_snprintf(msg, sizeof(msg), "CUDA: %s", cudaGetErrorString(e));
    raise_code(GKV_EIO, msg);
    return -1;
}

int cuda_sync_stream(uintptr_t stream)
{
    cudaError_t e;
    Py_BEGIN_ALLOW_THREADS e = cudaStreamSynchronize((cudaStream_t)stream);
    Py_END_ALLOW_THREADS
    return e == cudaSuccess ? 0 : raise_cuda(e);
}

int cuda_sync_device(int device)
{
    cudaError_t e;
    Py_BEGIN_ALLOW_THREADS
    int prev = -1;
    cudaGetDevice(&prev);
    e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    if (prev >= 0 && prev != device)
        cudaSetDevice(prev);
    Py_END_ALLOW_THREADS
    return e == cudaSuccess ? 0 : raise_cuda(e);
}

#else

int cuda_sync_stream(uintptr_t stream)
{
    (void)stream;
    raise_code(GKV_ENOTSUP, "this gpukv was built without CUDA");
    return -1;
}

int cuda_sync_device(int device)
{
    (void)device;
    raise_code(GKV_ENOTSUP, "this gpukv was built without CUDA");
    return -1;
}

#endif
