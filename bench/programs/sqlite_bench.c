/*
 * sqlite_bench.c: a deterministic SQLite workload for bench/run, linked with
 * the amalgamation (sqlite3.c from the libsqlite3-sys crate's source).
 *
 *   sqlite_bench ROWS
 *
 * In an in-memory database: inserts ROWS rows with a prepared statement in
 * one transaction, creates an index, then runs selects through the index, a
 * join with GROUP BY, aggregates, an ORDER BY with LIMIT, an UPDATE and a
 * DELETE. No clock, no random(): every run executes the same calls.
 */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

static sqlite3 *db;

static void die(const char *what)
{
    fprintf(stderr, "sqlite_bench: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

static void exec(const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sqlite_bench: %s: %s\n", sql, err ? err : "?");
        exit(1);
    }
}

static void query(const char *title, const char *sql)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        die(sql);
    printf("-- %s\n", title);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int n = sqlite3_column_count(st);
        for (int i = 0; i < n; i++) {
            const unsigned char *t = sqlite3_column_text(st, i);
            printf("%s%s", i ? "|" : "", t ? (const char *)t : "NULL");
        }
        printf("\n");
    }
    if (rc != SQLITE_DONE)
        die(sql);
    sqlite3_finalize(st);
}

int main(int argc, char **argv)
{
    int rows = argc > 1 ? atoi(argv[1]) : 20000;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK)
        die("open");
    exec("CREATE TABLE city(id INTEGER PRIMARY KEY, name TEXT NOT NULL, region INTEGER)");
    exec("CREATE TABLE sale(id INTEGER PRIMARY KEY, city INTEGER REFERENCES city(id),"
         " item TEXT, qty INTEGER, price REAL)");
    exec("BEGIN");
    static const char *names[] = {"Oslo", "Lima", "Kyiv", "Pune", "Rome", "Nice", "Bern", "Doha"};
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(db, "INSERT INTO city(id, name, region) VALUES(?1, ?2, ?3)", -1, &ins, NULL))
        die("prepare city");
    for (int i = 0; i < 8; i++) {
        sqlite3_bind_int(ins, 1, i + 1);
        sqlite3_bind_text(ins, 2, names[i], -1, SQLITE_STATIC);
        sqlite3_bind_int(ins, 3, i % 3);
        if (sqlite3_step(ins) != SQLITE_DONE)
            die("insert city");
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    if (sqlite3_prepare_v2(db, "INSERT INTO sale(city, item, qty, price) VALUES(?1, ?2, ?3, ?4)", -1, &ins, NULL))
        die("prepare sale");
    unsigned seed = 7;
    for (int i = 0; i < rows; i++) {
        char item[16];
        seed = seed * 1103515245u + 12345u;
        snprintf(item, sizeof item, "item%03u", (seed >> 16) % 400);
        sqlite3_bind_int(ins, 1, (int)((seed >> 8) % 8) + 1);
        sqlite3_bind_text(ins, 2, item, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(ins, 3, (int)(seed % 17) + 1);
        sqlite3_bind_double(ins, 4, (double)((seed >> 4) % 1000) / 8.0);
        if (sqlite3_step(ins) != SQLITE_DONE)
            die("insert sale");
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    exec("COMMIT");
    exec("CREATE INDEX sale_item ON sale(item)");

    /* Index lookups, one prepared statement run many times. */
    sqlite3_stmt *look;
    if (sqlite3_prepare_v2(db, "SELECT count(*), sum(qty) FROM sale WHERE item = ?1", -1, &look, NULL))
        die("prepare lookup");
    long total = 0;
    for (int i = 0; i < rows / 10; i++) {
        char item[16];
        snprintf(item, sizeof item, "item%03d", i % 400);
        sqlite3_bind_text(look, 1, item, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(look) == SQLITE_ROW)
            total += sqlite3_column_int64(look, 1);
        sqlite3_reset(look);
    }
    sqlite3_finalize(look);
    printf("-- lookups\n%ld\n", total);

    query("per city", "SELECT c.name, count(*), sum(s.qty), printf('%.2f', sum(s.qty * s.price))"
                      " FROM sale s JOIN city c ON c.id = s.city GROUP BY c.name ORDER BY c.name");
    query("per region", "SELECT c.region, count(DISTINCT s.item), max(s.qty) FROM sale s JOIN city c"
                        " ON c.id = s.city GROUP BY c.region ORDER BY 1");
    query("top items", "SELECT item, sum(qty) AS q FROM sale GROUP BY item ORDER BY q DESC, item LIMIT 5");
    query("like", "SELECT count(*) FROM sale WHERE item LIKE 'item1%' AND qty > 8");
    query("avg", "SELECT round(avg(price), 3), min(price), max(price) FROM sale");
    exec("UPDATE sale SET qty = qty + 1 WHERE city IN (SELECT id FROM city WHERE region = 1)");
    exec("DELETE FROM sale WHERE qty > 16");
    query("after update", "SELECT count(*), sum(qty) FROM sale");
    sqlite3_close(db);
    return 0;
}
