/* The library of the --srcline, -L and --libname tests
 * (analysis/uftrace_srcline.rs): lib_a() calls lib_b() once; built with
 * -g, each function's definition line is its DWARF decl_line. */

int lib_b(int x)
{
	return x * 3;
}

int lib_a(int x)
{
	return lib_b(x) + 1;
}
