package batch

import (
	"maps"
	"slices"
	"sync"
)

// HeldSet is the set of requests this process holds: those its runs are
// running right now, and those whose run ended but whose outcome waits for
// the database (parked by record, recorded by Runner.RecordPending). The
// reconcile loop finalizes RUNNING requests recorded for this worker that
// are not in it: nobody holds them any more.
type HeldSet struct {
	mu sync.Mutex
	// ids maps each held request to its outcome waiting to be recorded,
	// nil while its run goes on.
	ids map[int64]*pendingRecord
}

// NewHeldSet returns an empty set.
func NewHeldSet() *HeldSet { return &HeldSet{ids: map[int64]*pendingRecord{}} }

// Add marks a request held.
func (h *HeldSet) Add(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[id] = nil
}

// Remove marks a request no longer held.
func (h *HeldSet) Remove(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.ids, id)
}

// release marks a request whose run ended no longer held, unless its
// outcome waits to be recorded.
func (h *HeldSet) release(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids[id] == nil {
		delete(h.ids, id)
	}
}

// park keeps a request held with its outcome waiting to be recorded.
func (h *HeldSet) park(id int64, rec *pendingRecord) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[id] = rec
}

// parked returns the outcomes waiting to be recorded, by request.
func (h *HeldSet) parked() map[int64]*pendingRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[int64]*pendingRecord)
	for id, rec := range h.ids {
		if rec != nil {
			out[id] = rec
		}
	}
	return out
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
	return slices.Sorted(maps.Keys(h.ids))
}
