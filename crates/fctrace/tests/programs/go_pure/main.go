// A pure Go program (built with CGO_ENABLED=0: statically linked, no C
// library): fctrace cannot load its agent into it and must say so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("pure go")
	os.Exit(4)
}
