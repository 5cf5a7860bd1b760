// The GPU's f32 division of fragment statements (templates/device/fdiv.cuh), run on the host with
// rcp.approx.f32 modelled as badly as the PTX ISA allows (and worse), against the host's `a / b`
// (IEEE, correctly rounded): a mismatch in bits (any NaN equals any NaN) is printed.
// Usage: fdiv_model SEED COUNT  (COUNT cases per family; prints "cases N mismatches M").
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define __device__
#define __forceinline__ inline
static inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __fmul_rn(float a, float b) { return a * b; }

// The reciprocal's model: one of the floats at most 1.5 ulp from 1/b (the ISA bounds rcp.approx
// by 1 ulp), chosen by `rcp_mode` (0 nearest, 1 below, 2 above, 3 nearest - 1 ulp, 4 nearest +
// 1 ulp); ftz: a subnormal argument or result is flushed to zero, as rcp.approx.ftz does.
static int rcp_mode = 0;
static float model_rcp(float b) {
    if (std::fabs(b) < 0x1p-126f) b = std::copysign(0.0f, b);
    float r = 1.0f / b;
    if (std::isfinite(r) && r != 0.0f) {
        const double exact = 1.0 / (double)b;
        if (rcp_mode == 1 && (double)r > exact) r = std::nextafter(r, 0.0f);
        if (rcp_mode == 2 && (double)r < exact) r = std::nextafter(r, 2.0f * r);
        if (rcp_mode == 3) r = std::nextafter(r, 0.0f);
        if (rcp_mode == 4) r = std::nextafter(r, 2.0f * r);
    }
    if (std::fabs(r) < 0x1p-126f) r = std::copysign(0.0f, r);
    return r;
}
#define TSR_FDIV_RCP model_rcp
#include "../../../templates/device/fdiv.cuh"

static uint64_t state;
static uint64_t next() {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float bits(unsigned u) { return __uint_as_float(u); }
// A float with a random significand and sign and a biased exponent in [lo, hi] (0: subnormal).
static float with_exponent(int lo, int hi) {
    const unsigned e = (unsigned)(lo + (int)(next() % (uint64_t)(hi - lo + 1)));
    return bits((unsigned)(next() & 0x807fffffu) | (e << 23));
}

static long cases = 0, mismatches = 0;
static void check(float a, float b) {
    for (rcp_mode = 0; rcp_mode < 5; ++rcp_mode) {
        const float want = a / b, got = tsr_fdiv(a, b);
        ++cases;
        if (std::isnan(want) && std::isnan(got)) continue;
        if (__float_as_uint(want) != __float_as_uint(got)) {
            if (++mismatches <= 10)
                std::printf("mismatch rcp_mode %d: %a / %a = %a, got %a\n", rcp_mode, a, b, want, got);
        }
    }
}

int main(int argc, char** argv) {
    state = std::strtoull(argv[1], nullptr, 10);
    const long n = std::strtol(argv[2], nullptr, 10);
    static const unsigned special[] = {
        0x00000000u, 0x00000001u, 0x00000002u, 0x00000003u, 0x00400000u, 0x007fffffu, 0x00800000u,
        0x00800001u, 0x00ffffffu, 0x01000000u, 0x0c800000u, 0x0d000000u, 0x0d7fffffu, 0x1a000000u,
        0x33800000u, 0x34000000u, 0x3effffffu, 0x3f000000u, 0x3f7fffffu, 0x3f800000u, 0x3f800001u,
        0x3fbfffffu, 0x3fc00000u, 0x3fffffffu, 0x40000000u, 0x40400000u, 0x40a00000u, 0x4b000000u,
        0x72800000u, 0x7e7fffffu, 0x7e800000u, 0x7effffffu, 0x7f000000u, 0x7f7fffffu, 0x7f800000u,
        0x7fc00000u, 0x7f800001u, 0x7fffffffu};
    for (unsigned x : special)
        for (unsigned y : special)
            for (unsigned s = 0; s < 4; ++s) check(bits(x | (s & 1u) << 31), bits(y | (s & 2u) << 30));
    for (long i = 0; i < n; ++i) {
        // any two floats
        check(bits((unsigned)next()), bits((unsigned)next()));
        // ordinary magnitudes (the fast path)
        check(with_exponent(100, 154), with_exponent(100, 154));
        // quotients near a midpoint between two floats: a = b * m rounded, m a 25-bit midpoint
        {
            const float b = with_exponent(1, 254);
            const double m = (double)((next() & 0xffffffull) | 0x1000001ull) * 0x1p-24;  // odd: a midpoint in [1, 2)
            const int k = (int)(next() % 300) - 150;
            const float a = (float)std::ldexp((double)b * m, k);
            check(a, b);
            check(std::nextafter(a, 0.0f), b);
            check(std::nextafter(a, INFINITY), b);
        }
        // quotients near a float: a = b * q rounded
        {
            const float b = with_exponent(0, 254), q = with_exponent(0, 254);
            const float a = (float)((double)b * (double)q);
            check(a, b);
            check(std::nextafter(a, 0.0f), b);
        }
        // divisors whose significand is all ones or almost, any dividend
        check(with_exponent(1, 254), bits((unsigned)(next() & 0xff800000u) | (0x007fffffu - (unsigned)(next() % 8))));
        // subnormal and overflowing results, subnormal operands
        check(with_exponent(0, 60), with_exponent(100, 254));
        check(with_exponent(190, 254), with_exponent(0, 70));
        check(with_exponent(0, 1), with_exponent(0, 140));
        {  // small multiples of the smallest subnormal over small integers and powers of two: ties
            const float a = bits((unsigned)(next() % 64) | (unsigned)(next() & 0x80000000u));
            const float b = (float)(1 + next() % 16) * std::ldexp(1.0f, (int)(next() % 8));
            check(a, b);
            check(bits(__float_as_uint(a) << (next() % 12)), b);
        }
    }
    std::printf("cases %ld mismatches %ld\n", cases, mismatches);
    return mismatches != 0;
}
