// Region mode's group reductions (transpile/cpu/group_reduce.py): group_sum, group_max and
// group_min computed once for the group from every tile's value, in the order of operations of
// fiber mode's tsr_group_reduce (templates/device/group_reduce.cuh), so that both modes give the
// same bits.  There, with whole warps, each warp's lanes exchange values by shuffles
// (v = op(v, __shfl_xor_sync(v, o)) for o = 16, 8, 4, 2, 1), lane 0 of each warp stores its value
// and every tile combines the stored values left to right; lane 0's value after the shuffles is
// the tree below (at each step, lane l < o combines its own value with lane l + o's, its own
// first).  Otherwise every tile combines all the values left to right.  `v`: the tiles' values,
// in the order of their linear index; T: the type the fiber-mode template computes in.
#pragma once

template <int NT, class T, class V, class Op>
inline T tsr_region_reduce(const V* v, Op op) {
  if (NT % 32 == 0) {
    T r{};
    for (int w = 0; w < NT / 32; ++w) {
      T a[32];
      for (int l = 0; l < 32; ++l) a[l] = static_cast<T>(v[w * 32 + l]);
      for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < o; ++l) a[l] = op(a[l], a[l + o]);
      r = w == 0 ? a[0] : op(r, a[0]);
    }
    return r;
  }
  T r = static_cast<T>(v[0]);
  for (int i = 1; i < NT; ++i) r = op(r, static_cast<T>(v[i]));
  return r;
}
