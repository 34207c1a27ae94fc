/* attach_sqlite.c: SQLite in a loop, for `fctrace -p`. Each line "go" on
 * stdin inserts 100 rows into an in-memory table, then prints the count
 * and sum (a round's line); "quit" ends it (exit status 3). */
#include <stdio.h>
#include <string.h>
#include "sqlite3.h"

static int row_cb(void *arg, int n, char **v, char **names) {
    printf("round %d: rows %s sum %s\n", *(int *)arg, v[0], v[1]);
    fflush(stdout);
    return 0;
}

int main(void) {
    sqlite3 *db;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK)
        return 1;
    if (sqlite3_exec(db, "CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER, s TEXT)", 0, 0, 0))
        return 1;
    printf("ready\n");
    fflush(stdout);
    char line[64];
    int round = 0;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "quit", 4))
            break;
        round++;
        sqlite3_exec(db, "BEGIN", 0, 0, 0);
        for (int i = 0; i < 100; i++) {
            char sql[128];
            snprintf(sql, sizeof sql, "INSERT INTO t(v, s) VALUES (%d, 'row %d')", round * 1000 + i, i);
            if (sqlite3_exec(db, sql, 0, 0, 0))
                return 2;
        }
        sqlite3_exec(db, "COMMIT", 0, 0, 0);
        sqlite3_exec(db, "SELECT count(*), sum(v) FROM t", row_cb, &round, 0);
    }
    sqlite3_close(db);
    printf("done after %d rounds\n", round);
    return 3;
}
