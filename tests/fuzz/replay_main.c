/*
 * replay_main.c - runs a libFuzzer harness's LLVMFuzzerTestOneInput on
 * each file named on the command line, without libFuzzer: the normal test
 * suite (tests/test_fuzz_regressions.py) builds a harness with this and
 * the system's C compiler, under ASan + UBSan where it has them, to replay
 * the seed corpus and the regression inputs. Prints the number of files
 * replayed; a failed check in the harness aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, k;
    do {
        if (len == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *b = realloc(buf, cap);
            if (b == NULL) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = b;
        }
        k = fread(buf + len, 1, cap - len, f);
        len += k;
    } while (k > 0);
    int bad = ferror(f);
    fclose(f);
    if (!bad) {
        LLVMFuzzerTestOneInput(buf, len);
    }
    free(buf);
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (replay(argv[i]) != 0) {
            return 1;
        }
    }
    printf("%d\n", argc - 1);
    return 0;
}
