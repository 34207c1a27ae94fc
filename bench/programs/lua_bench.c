/*
 * lua_bench.c: runs a Lua script with the Lua 5.4 interpreter built from
 * the lua-src crate's C sources (the crate ships no lua.c, so this is the
 * minimal stand-in).
 *
 *   lua_bench SCRIPT [ARG]     (ARG is the script's ...)
 */
#include <stdio.h>
#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lua_bench SCRIPT [ARG]\n");
        return 2;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    if (luaL_loadfile(L, argv[1]) != LUA_OK) {
        fprintf(stderr, "lua_bench: %s\n", lua_tostring(L, -1));
        return 1;
    }
    int nargs = 0;
    if (argc > 2) {
        lua_pushstring(L, argv[2]);
        nargs = 1;
    }
    if (lua_pcall(L, nargs, 0, 0) != LUA_OK) {
        fprintf(stderr, "lua_bench: %s\n", lua_tostring(L, -1));
        return 1;
    }
    lua_close(L);
    return 0;
}
