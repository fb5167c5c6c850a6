package slack

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// AdminsRole is the approvers entry that lets the admins and owners of the
// Slack workspace a conversation is in decide its calls.
const AdminsRole = Kind + ":admins"

// Bounds of admin lookups: one users.info call may take adminLookupTimeout
// (a click is answered within Slack's 3 s); an answer is kept adminTTL,
// at most maxAdmins of them.
const (
	adminLookupTimeout = 1500 * time.Millisecond
	adminTTL           = time.Minute
	maxAdmins          = 4096
)

// Admins tells whether a Slack user is an admin or owner of a workspace,
// from users.info (scope users:read), keeping each answer for a minute.
type Admins struct {
	api *slack.Client
	// Now is the clock (tests); nil = time.Now.
	Now func() time.Time

	mu   sync.Mutex
	seen map[string]adminAnswer
}

type adminAnswer struct {
	admin bool
	at    time.Time
}

// NewAdmins returns the lookups of the bot token's workspace (apiURL: the
// Web API base URL override, "" for Slack's).
func NewAdmins(token, apiURL string) *Admins {
	opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: HTTPTimeout})}
	if apiURL != "" {
		opts = append(opts, slack.OptionAPIURL(strings.TrimSuffix(apiURL, "/")+"/"))
	}
	return &Admins{api: slack.New(token, opts...), seen: map[string]adminAnswer{}}
}

func (a *Admins) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Is reports whether user is an admin, owner or primary owner of workspace
// team: an active, human member of that very workspace (a guest from
// another workspace in a shared channel is not, whatever their role at
// home). A failed lookup is an error and is not kept.
func (a *Admins) Is(ctx context.Context, team, user string) (bool, error) {
	key := team + "/" + user
	a.mu.Lock()
	if ans, ok := a.seen[key]; ok && a.now().Sub(ans.at) < adminTTL {
		a.mu.Unlock()
		return ans.admin, nil
	}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, adminLookupTimeout)
	defer cancel()
	u, err := a.api.GetUserInfoContext(ctx, user)
	if err != nil {
		return false, fmt.Errorf("slack: users.info %s: %w", user, err)
	}
	admin := u.ID == user && u.TeamID == team && !u.Deleted && !u.IsBot && (u.IsAdmin || u.IsOwner || u.IsPrimaryOwner)
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if len(a.seen) >= maxAdmins {
		for k, v := range a.seen {
			if now.Sub(v.at) >= adminTTL {
				delete(a.seen, k)
			}
		}
		if len(a.seen) >= maxAdmins {
			a.seen = map[string]adminAnswer{}
		}
	}
	a.seen[key] = adminAnswer{admin: admin, at: now}
	return admin, nil
}
