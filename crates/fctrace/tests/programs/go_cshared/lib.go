// Go code in a shared library (go build -buildmode=c-shared) for
// fctrace's tests (go_cgo.rs): GoWork runs goroutines whose stacks grow
// and are copied, and the garbage collector; go_cshared_host.c calls it.
package main

import "C"
import "runtime"

func deep(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + 1
}

//export GoWork
func GoWork(n C.int) C.int {
	ch := make(chan int)
	for i := 0; i < 4; i++ {
		go func(i int) { ch <- deep(3000 + i) }(i)
	}
	t := 0
	for i := 0; i < 4; i++ {
		t += <-ch
	}
	runtime.GC()
	return C.int(t) + n
}

func main() {}
