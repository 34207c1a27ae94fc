/* Sets umask 0, then runs itself again (exec): the new image's agent
 * creates its symbol file under that umask. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int depth_of(const char *s) { return s[0] - '0'; }

int main(int argc, char **argv) {
    int depth = argc > 1 ? depth_of(argv[1]) : 0;
    umask(0);
    printf("image %d\n", depth);
    fflush(stdout);
    if (depth < 2) {
        char next[2] = {(char)('0' + depth + 1), 0};
        execl("/proc/self/exe", argv[0], next, (char *)0);
        perror("execl");
        return 1;
    }
    return 0;
}
