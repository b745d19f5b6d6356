// Command racingerrors fails calls from many goroutines at once, each
// allocating between calls so that the runtime switches among them, and
// checks that every error's message is its own call's: the SDK read the
// host's message in a second call, after an allocation that could let
// another goroutine's failed call replace it.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/vkrt/vkrt/wasmhost/guest"
)

func main() {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		wrong  int
		sample string
	)
	for g := range 32 {
		wg.Go(func() {
			var keep [][]byte
			for range 500 {
				var err error
				if g%2 == 0 {
					err = guest.BufferOf(0, 16).Free()
				} else {
					err = guest.Record("")
				}
				keep = append(keep, make([]byte, 8<<10))
				var e *guest.Error
				if !errors.As(err, &e) || !strings.HasPrefix(e.Message, e.Op+":") {
					mu.Lock()
					wrong++
					sample = fmt.Sprintf("%s: %v (message %q)", e.Op, err, e.Message)
					mu.Unlock()
				}
				if len(keep) > 64 {
					keep = keep[:0]
				}
			}
		})
	}
	wg.Wait()
	if wrong > 0 {
		fmt.Printf("racingerrors: %d of 16000 errors carried another call's message, e.g. %s\n", wrong, sample)
		os.Exit(1)
	}
	fmt.Println("racingerrors: every error carried its own call's message")
}
