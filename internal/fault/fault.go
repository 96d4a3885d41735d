// Package fault provides named fault points for tests: a component checks a
// point at a step (for example "after XADD, before the checkpoint"), and a
// test arms it to make the component fail there abruptly. A nil *Set is valid
// and never fires, so production code pays one nil check per point.
package fault

import (
	"errors"
	"fmt"
	"sync"
)

// ErrInjected is wrapped by every error a fault point returns.
var ErrInjected = errors.New("injected fault")

// Set holds the armed fault points of one component instance.
type Set struct {
	mu    sync.Mutex
	armed map[string]int
	hits  map[string]int
}

// Arm makes the next times checks of point fail; times < 0 means every check.
func (s *Set) Arm(point string, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed == nil {
		s.armed = map[string]int{}
	}
	s.armed[point] = times
}

// Disarm stops point from failing.
func (s *Set) Disarm(point string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.armed, point)
}

// Check returns an error wrapping ErrInjected when point is armed.
func (s *Set) Check(point string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.armed[point]
	if !ok || n == 0 {
		return nil
	}
	if n > 0 {
		s.armed[point] = n - 1
	}
	if s.hits == nil {
		s.hits = map[string]int{}
	}
	s.hits[point]++
	return fmt.Errorf("%w at %s", ErrInjected, point)
}

// Hits returns how often point has fired.
func (s *Set) Hits(point string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[point]
}
