/* CUB's DeviceRadixSort::SortPairs for the CUDA emulation (tests only): a
 * stable sort by the key bits [begin_bit, end_bit), queued on the stream like
 * CUB's kernels, using the caller's temporary storage (which must be the size
 * the size query returned, in device memory). */
#ifndef LL_CUDA_EMU_CUB_RADIX_SORT
#define LL_CUDA_EMU_CUB_RADIX_SORT

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

namespace ll_emu {
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn, const void *func = nullptr,
             unsigned cluster = 1, bool pdl = false); /* emu_internal.h */
int device_range(const void *p, size_t n);
} // namespace ll_emu

namespace cub {
struct DeviceRadixSort {
    template <typename K, typename V, typename N>
    static cudaError_t SortPairs(void *temp, size_t &temp_bytes, const K *keys_in, K *keys_out, const V *vals_in,
                                 V *vals_out, N num, int begin_bit = 0, int end_bit = (int)(sizeof(K) * 8),
                                 cudaStream_t stream = 0) {
        const size_t n = (size_t)num;
        const size_t need = 256 + n * (sizeof(K) + sizeof(V) + sizeof(size_t));
        if (!temp) {
            temp_bytes = need;
            return cudaSuccess;
        }
        if (temp_bytes < need || ll_emu::device_range(temp, temp_bytes) != 1) return cudaErrorInvalidValue;
        if (n == 0) return cudaSuccess;
        if (ll_emu::device_range(keys_in, n * sizeof(K)) != 1 || ll_emu::device_range(keys_out, n * sizeof(K)) != 1 ||
            ll_emu::device_range(vals_in, n * sizeof(V)) != 1 || ll_emu::device_range(vals_out, n * sizeof(V)) != 1)
            return cudaErrorInvalidValue;
        ll_emu::enqueue(stream, "cub::DeviceRadixSort::SortPairs", [=]() {
            const int width = end_bit - begin_bit;
            const unsigned long long mask = width >= 64 ? ~0ull : ((1ull << width) - 1) << begin_bit;
            std::vector<size_t> idx(n);
            std::iota(idx.begin(), idx.end(), (size_t)0);
            std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
                return ((unsigned long long)keys_in[a] & mask) < ((unsigned long long)keys_in[b] & mask);
            });
            std::vector<K> k(n);
            std::vector<V> v(n);
            for (size_t i = 0; i < n; i++) {
                k[i] = keys_in[idx[i]];
                v[i] = vals_in[idx[i]];
            }
            std::copy(k.begin(), k.end(), keys_out);
            std::copy(v.begin(), v.end(), vals_out);
        });
        return cudaSuccess;
    }
};
} // namespace cub

#endif
