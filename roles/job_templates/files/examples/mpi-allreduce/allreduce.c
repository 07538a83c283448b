/*
 * mpi-allreduce: MPI_Allreduce of a vector of doubles, checked and timed.
 *
 *   allreduce [COUNT [ITERATIONS]]     (defaults: 1048576 doubles = 8 MiB, 20 iterations)
 *
 * Rank r contributes value(r, i) = (r + 1) + (i % 1000) / 2 at index i, so the
 * sum at i is ranks * (ranks + 1) / 2 + ranks * (i % 1000) / 2: small whole
 * and half numbers, exact in a double, so the check is exact too. Every rank
 * checks every element of its result after the warm-up and the timed iterations.
 *
 * Timing: two untimed warm-up iterations, then ITERATIONS timed ones between
 * barriers; the slowest rank's time counts. algbw = bytes / time per iteration;
 * busbw = algbw * 2 (n - 1) / n, the traffic each rank's link carries in a
 * ring all-reduce (the figure nccl-tests print; 0 for a single rank).
 *
 * Rank 0 prints a summary, then one line:
 *   GPUCLUS_RESULT {"template":"mpi-allreduce","ranks":N,"nodes":n,"correct":true,"busbw_gbps":X}
 * Exit status 0 when every rank's sums were right, else 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_COUNT (1L << 20)
#define DEFAULT_ITERATIONS 20
#define WARMUP_ITERATIONS 2

static double value(int rank, long i) { return (double)(rank + 1) + (double)(i % 1000) / 2.0; }

static double expected(int ranks, long i) {
    return (double)ranks * (ranks + 1) / 2.0 + (double)ranks * (double)(i % 1000) / 2.0;
}

static long count_wrong(const double *sums, long count, int ranks) {
    long wrong = 0;
    for (long i = 0; i < count; i++) {
        if (sums[i] != expected(ranks, i)) wrong++;
    }
    return wrong;
}

static long parse_positive(const char *text, const char *what, long fallback, int rank) {
    if (text == NULL) return fallback;
    char *end = NULL;
    long number = strtol(text, &end, 10);
    if (end == text || *end != '\0' || number < 1) {
        if (rank == 0) fprintf(stderr, "mpi-allreduce: %s must be a positive whole number, not '%s'\n", what, text);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return number;
}

static int compare_names(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

/* Distinct processor (host) names across all ranks; the answer is rank 0's. */
static int count_nodes(int rank, int ranks) {
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    memset(name, 0, sizeof name);
    MPI_Get_processor_name(name, &length);
    char *all = rank == 0 ? calloc((size_t)ranks, MPI_MAX_PROCESSOR_NAME) : NULL;
    if (rank == 0 && all == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
    int nodes = 0;
    if (rank == 0) {
        qsort(all, (size_t)ranks, MPI_MAX_PROCESSOR_NAME, compare_names);
        for (int r = 0; r < ranks; r++) {
            if (r == 0 || strcmp(all + (size_t)r * MPI_MAX_PROCESSOR_NAME,
                                 all + (size_t)(r - 1) * MPI_MAX_PROCESSOR_NAME) != 0) {
                nodes++;
            }
        }
        free(all);
    }
    return nodes;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    long count = parse_positive(argc > 1 ? argv[1] : NULL, "COUNT", DEFAULT_COUNT, rank);
    long iterations = parse_positive(argc > 2 ? argv[2] : NULL, "ITERATIONS", DEFAULT_ITERATIONS, rank);
    if (count > 1L << 30) {
        if (rank == 0) fprintf(stderr, "mpi-allreduce: COUNT %ld is too large (at most 2^30)\n", count);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    double *send = malloc((size_t)count * sizeof(double));
    double *receive = malloc((size_t)count * sizeof(double));
    if (send == NULL || receive == NULL) {
        fprintf(stderr, "mpi-allreduce: rank %d cannot allocate 2 x %ld doubles\n", rank, count);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < count; i++) send[i] = value(rank, i);

    /* Warm-up (connections, buffers), checked; then the timed iterations, only
       MPI inside the clock; then the last result is checked too. */
    long wrong = 0;
    for (long iteration = 0; iteration < WARMUP_ITERATIONS; iteration++) {
        memset(receive, 0, (size_t)count * sizeof(double));
        MPI_Allreduce(send, receive, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        wrong += count_wrong(receive, count, ranks);
    }
    memset(receive, 0, (size_t)count * sizeof(double));
    MPI_Barrier(MPI_COMM_WORLD);
    double elapsed = -MPI_Wtime();
    for (long iteration = 0; iteration < iterations; iteration++) {
        MPI_Allreduce(send, receive, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    elapsed += MPI_Wtime();
    wrong += count_wrong(receive, count, ranks);

    double slowest = 0.0;
    MPI_Reduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long wrong_total = 0;
    MPI_Allreduce(&wrong, &wrong_total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    int nodes = count_nodes(rank, ranks);

    if (rank == 0) {
        double bytes = (double)count * sizeof(double);
        double per_iteration = slowest / (double)iterations;
        double algbw = per_iteration > 0.0 ? bytes / per_iteration / 1e9 : 0.0;
        double busbw = algbw * 2.0 * (ranks - 1) / ranks;
        printf("mpi-allreduce: %d ranks on %d node(s), %.1f MiB x %ld iterations: %.3f ms each, "
               "algbw %.3f GB/s, busbw %.3f GB/s, %s\n",
               ranks, nodes, bytes / (1 << 20), iterations, per_iteration * 1e3, algbw, busbw,
               wrong_total == 0 ? "sums correct" : "WRONG SUMS");
        if (wrong_total != 0) {
            fprintf(stderr, "mpi-allreduce: FAILED: %ld wrong elements across all ranks and iterations\n",
                    wrong_total);
        }
        printf("GPUCLUS_RESULT {\"template\":\"mpi-allreduce\",\"ranks\":%d,\"nodes\":%d,\"correct\":%s,"
               "\"busbw_gbps\":%.4f}\n",
               ranks, nodes, wrong_total == 0 ? "true" : "false", busbw);
        fflush(stdout);
    }
    free(send);
    free(receive);
    MPI_Finalize();
    return wrong_total == 0 ? 0 : 1;
}
