package feed

import "time"

// SetClock replaces b's clock (set before first use).
func SetClock(b *InProcess, now func() time.Time) { b.now = now }
