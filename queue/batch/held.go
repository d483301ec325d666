package batch

import (
	"slices"
	"sync"
)

// HeldSet is the set of requests this process is running right now. The
// reconcile loop finalizes RUNNING requests recorded for this worker that are
// not in it: their result recording failed and nobody holds them any more.
type HeldSet struct {
	mu  sync.Mutex
	ids map[int64]struct{}
}

// NewHeldSet returns an empty set.
func NewHeldSet() *HeldSet { return &HeldSet{ids: map[int64]struct{}{}} }

// Add marks a request held.
func (h *HeldSet) Add(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[id] = struct{}{}
}

// Remove marks a request no longer held.
func (h *HeldSet) Remove(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids, id)
}

// Has reports whether a request is held.
func (h *HeldSet) Has(id int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.ids[id]
	return ok
}

// IDs returns the held request ids in ascending order.
func (h *HeldSet) IDs() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make([]int64, 0, len(h.ids))
	for id := range h.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
