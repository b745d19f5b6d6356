// Package callgate admits a device's calls until the device closes, and
// lets Close wait for the calls already running: what the cpu and Vulkan
// devices both need so that Close never releases memory or objects a call
// is still using, and calls after it fail as closed.
package callgate

import "sync"

// Gate counts the calls between Enter and Leave. The zero Gate is open.
type Gate struct {
	mu      sync.Mutex
	closed  bool
	running int
	drained chan struct{} // closed when the last running call leaves, once Close waits
}

// Enter admits a call, false once Close has begun. An admitted call must
// Leave, and must not Enter again before it does (a Close in between would
// refuse it half way).
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.running++
	return true
}

// Leave ends a call Enter admitted.
func (g *Gate) Leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.running == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// Close refuses later calls and waits for the running ones to leave. Only
// the first Close waits and reports true; later ones return false at once.
func (g *Gate) Close() bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.closed = true
	var drained chan struct{}
	if g.running > 0 {
		drained = make(chan struct{})
		g.drained = drained
	}
	g.mu.Unlock()
	if drained != nil {
		<-drained
	}
	return true
}

// Closed reports whether Close has begun.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}
