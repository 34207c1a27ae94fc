/*
 * sqlite_driver.c: a small, deterministic workload for the SQLite
 * amalgamation (sqlite3.c, from the libsqlite3-sys crate), so that a real
 * code base of thousands of functions we did not write runs under fctrace
 * and callgrind. Opens :memory:, creates tables, inserts a few hundred rows
 * in one transaction with a prepared statement, adds an index, and runs
 * queries with GROUP BY, ORDER BY, a JOIN and an index lookup. No dates,
 * no random(): nothing depends on the clock or on chance.
 */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

#define ROWS 2000

static sqlite3 *db;

static void die(const char *what)
{
    fprintf(stderr, "sqlite_driver: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
}

static void exec(const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sqlite_driver: %s: %s\n", sql, err ? err : "?");
        exit(1);
    }
}

/* Runs a query and prints each row as `a|b|c`. */
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

int main(void)
{
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
    for (int i = 0; i < ROWS; i++) {
        char item[16];
        seed = seed * 1103515245u + 12345u;
        snprintf(item, sizeof item, "item%02u", (seed >> 16) % 40);
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

    query("per city", "SELECT c.name, count(*), sum(s.qty), printf('%.2f', sum(s.qty * s.price))"
                      " FROM sale s JOIN city c ON c.id = s.city GROUP BY c.name ORDER BY c.name");
    query("per region", "SELECT c.region, count(DISTINCT s.item), max(s.qty) FROM sale s JOIN city c"
                        " ON c.id = s.city GROUP BY c.region ORDER BY 1");
    query("top items", "SELECT item, sum(qty) AS q FROM sale GROUP BY item ORDER BY q DESC, item LIMIT 5");
    query("index lookup", "SELECT count(*), min(qty), max(qty) FROM sale WHERE item = 'item07'");
    query("like", "SELECT count(*) FROM sale WHERE item LIKE 'item1%' AND qty > 8");
    exec("UPDATE sale SET qty = qty + 1 WHERE city IN (SELECT id FROM city WHERE region = 1)");
    exec("DELETE FROM sale WHERE qty > 16");
    query("after update", "SELECT count(*), sum(qty) FROM sale");
    sqlite3_close(db);
    return 0;
}
