/* With arguments: runs the program they name (execv). Without: says so. */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("no program to run\n");
        return 0;
    }
    printf("running %s\n", argv[1]);
    fflush(stdout);
    execv(argv[1], &argv[1]);
    perror("execv");
    return 1;
}
