/*
 * privacy.c: what a program can see of fctrace's live-mode directory.
 * Lists the entries of $TMPDIR whose name starts with "fctrace-live-" with
 * their permissions, and says whether one is named after the parent
 * process (fctrace: a name anyone could predict and plant first). Without
 * fctrace, the directory has no such entry and nothing is printed but the
 * count.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
    const char *dir = getenv("TMPDIR");
    if (!dir)
        return 2;
    DIR *d = opendir(dir);
    if (!d)
        return 2;
    char predictable[64];
    snprintf(predictable, sizeof predictable, "fctrace-live-%d", (int)getppid());
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "fctrace-live-", 13) != 0)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0)
            continue;
        n++;
        printf("live directory: mode %o%s\n", (unsigned)(st.st_mode & 07777),
               strcmp(e->d_name, predictable) == 0 ? ", named after fctrace's pid" : "");
    }
    closedir(d);
    printf("%d live directories\n", n);
    return 0;
}
