/* Prints its environment twice: as the C library has it (environ) and as
 * the kernel shows it (/proc/self/environ); with an argument, runs itself
 * again first (exec) with that argument removed. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    if (argc > 1) {
        char *args[] = {argv[0], NULL};
        execv("/proc/self/exe", args);
        perror("execv");
        return 1;
    }
    printf("-- environ\n");
    for (char **e = environ; *e; e++)
        printf("%s\n", *e);
    printf("-- /proc/self/environ\n");
    FILE *f = fopen("/proc/self/environ", "r");
    if (!f) {
        perror("/proc/self/environ");
        return 1;
    }
    int c;
    while ((c = fgetc(f)) != EOF)
        putchar(c ? c : '\n');
    fclose(f);
    return 0;
}
