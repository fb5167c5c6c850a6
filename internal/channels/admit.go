package channels

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Admitter decides whether the system takes new work now
// (admission.Limiter): a refusal carries when to retry (RetryDelay).
type Admitter interface {
	Admit() (release func(), refusal error)
}

// Admitted serves h only while adm admits: a refused request is answered
// 429 with Retry-After before anything is read or handed to Temporal, so
// the sender keeps the event and sends it again — it was never accepted.
// For doors whose senders retry on 429 (webhook endpoints); a chat
// platform that redelivers at once would turn it into a retry storm.
func Admitted(kind string, h http.Handler, adm Admitter, log *slog.Logger) http.Handler {
	if adm == nil {
		return h
	}
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release, refusal := adm.Admit()
		if refusal != nil {
			wait := time.Second
			var d interface{ RetryDelay() time.Duration }
			if errors.As(refusal, &d) && d.RetryDelay() > 0 {
				wait = d.RetryDelay()
			}
			secs := strconv.Itoa(int((wait + time.Second - 1) / time.Second))
			log.Warn("channel: request refused before it was accepted; the sender retries", "kind", kind, "retry_after", secs, "error", refusal)
			w.Header().Set("Retry-After", secs)
			http.Error(w, fmt.Sprintf("not accepted: %v; send it again after %s s", refusal, secs), http.StatusTooManyRequests)
			return
		}
		release() // a door holds no place: it hands the event off and answers
		h.ServeHTTP(w, r)
	})
}
