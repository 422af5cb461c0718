/*
 * tests/mkl/intel_cpu.c - a preload for test_augment_mkl.py: makes the MKL
 * linked into torch take its Intel code paths on a CPU of another vendor.
 *
 * MKL picks its kernels by the CPU's features only where it finds an Intel
 * CPU (mkl_serv_intel_cpu_true); elsewhere it takes its AVX2 or generic
 * paths. Its AVX-512 SGEMM fuses a multiply-add in the product behind
 * torchvision's affine grid, so the warps' tests must hold on it, and CI
 * hosts are often AMD: preloaded (LD_PRELOAD), these answer "Intel" to
 * MKL's own question, and on a CPU with AVX-512 MKL then runs the path an
 * Intel Xeon runs. Nothing else changes.
 */

/* 1: the CPU is an Intel one (MKL's internal vendor check). */
int mkl_serv_intel_cpu_true(void);
int mkl_serv_intel_cpu_true(void)
{
    return 1;
}

/* The same question under its older name. */
int mkl_serv_intel_cpu(void);
int mkl_serv_intel_cpu(void)
{
    return 1;
}
