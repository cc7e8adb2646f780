package api

import (
	"sync"
)

// slots counts blocking queries waiting, overall and per key.
type slots struct {
	max, perKey int

	mu   sync.Mutex
	n    int            // guarded by mu
	held map[string]int // guarded by mu
}

// acquire takes a slot for key; ok is false when the node or the key holds
// all it may. release gives the slot back.
func (s *slots) acquire(key string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.max || s.held[key] >= s.perKey {
		return nil, false
	}
	s.n++
	s.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.n--
			if s.held[key]--; s.held[key] == 0 {
				delete(s.held, key)
			}
		})
	}, true
}

func (s *slots) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
