// A Go program with cgo for fctrace's tests (go_cgo.rs): goroutines whose
// stacks grow (deep recursion: each stack is copied several times), the
// garbage collector, and C functions that call each other and call back
// into Go. It prints "ready", then runs one round per "run" line on stdin
// (printing "round N"), and at "quit" prints its total and exits with
// status 3. With an argument N it runs N rounds without reading stdin.
package main

/*
#include <stdlib.h>
int c_top(int x);
int c_calls_go(int x);
void c_print(const char *s);
void free_string(char *s);
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
)

//export goCallback
func goCallback(x C.int) C.int {
	return C.int(deep(int(x)%50+200, nil) % 1000)
}

// deep recurses n levels with a frame big enough that the goroutine's
// stack grows (and is copied) several times.
func deep(n int, keep []byte) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0]) + len(keep)
	}
	return deep(n-1, append(keep, pad[n%256])) + 1
}

func round(r int) int {
	var wg sync.WaitGroup
	results := make([]int, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			results[g] = deep(2000+g, nil)
		}(g)
	}
	wg.Wait()
	runtime.GC()
	total := 0
	for _, v := range results {
		total += v
	}
	total += int(C.c_top(C.int(r)))
	total += int(C.c_calls_go(C.int(r)))
	return total
}

func say(s string) {
	msg := C.CString(s)
	C.c_print(msg)
	C.free_string(msg)
}

func main() {
	total := 0
	if len(os.Args) > 1 {
		n, _ := strconv.Atoi(os.Args[1])
		for r := 0; r < n; r++ {
			total += round(r)
		}
	} else {
		say("ready\n")
		in := bufio.NewScanner(os.Stdin)
		for r := 0; in.Scan() && in.Text() == "run"; r++ {
			total += round(r)
			say(fmt.Sprintf("round %d\n", r+1))
		}
	}
	say(fmt.Sprintf("total %d\n", total))
	os.Exit(3)
}
