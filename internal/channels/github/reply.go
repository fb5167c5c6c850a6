package github

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/bradleyfalzon/ghinstallation/v2"
	gh "github.com/google/go-github/v75/github"

	"github.com/fastagent/fastagent/internal/channels"
	"github.com/fastagent/fastagent/internal/wire"
)

// MaxComment is GitHub's limit on a comment or review body, in characters
// (counted here in UTF-16 units, the stricter reading).
const MaxComment = 65536

// markerPrefix starts the hidden marker every reply part carries:
// "<!-- fastagent:turn=<key> part=<i> -->".
const markerPrefix = "<!-- fastagent:turn="

// Marker is the hidden marker of part i of turn key's reply.
func Marker(key string, part int) string {
	return markerPrefix + key + " part=" + strconv.Itoa(part) + " -->"
}

var markerRE = regexp.MustCompile(`<!-- fastagent:turn=(\S+) part=(\d+) -->`)

// scanPages bounds how many pages (of 100) of an issue's most recent
// comments or reviews are searched for a marker.
const scanPages = 5

// Auth is how the replier authenticates: a token, or a GitHub App (its ID
// and PEM private key; each reply uses its installation's token, minted
// and refreshed by ghinstallation).
type Auth struct {
	Token      string
	AppID      int64
	PrivateKey []byte
}

// authFromEnv reads the token, or else the App's ID and key.
func authFromEnv(c Config, getenv func(string) string) (Auth, error) {
	if c.TokenEnv == "" {
		c.TokenEnv = DefaultTokenEnv
	}
	if c.AppIDEnv == "" {
		c.AppIDEnv = DefaultAppIDEnv
	}
	if c.PrivateKeyEnv == "" {
		c.PrivateKeyEnv = DefaultPrivateKeyEnv
	}
	if t := getenv(c.TokenEnv); t != "" {
		return Auth{Token: t}, nil
	}
	id := getenv(c.AppIDEnv)
	if id == "" {
		return Auth{}, fmt.Errorf("set %s, or %s and %s (or %s_FILE) for a GitHub App", c.TokenEnv, c.AppIDEnv, c.PrivateKeyEnv, c.PrivateKeyEnv)
	}
	appID, err := strconv.ParseInt(id, 10, 64)
	if err != nil || appID <= 0 {
		return Auth{}, fmt.Errorf("appIdEnv: %s is not a GitHub App ID", c.AppIDEnv)
	}
	key := []byte(getenv(c.PrivateKeyEnv))
	if len(key) == 0 {
		if f := getenv(c.PrivateKeyEnv + "_FILE"); f != "" {
			if key, err = os.ReadFile(f); err != nil { //nolint:gosec // G304: the operator names the key file
				return Auth{}, fmt.Errorf("privateKeyEnv: %w", err)
			}
		}
	}
	if len(key) == 0 {
		return Auth{}, fmt.Errorf("privateKeyEnv: set %s or %s_FILE to the GitHub App's private key", c.PrivateKeyEnv, c.PrivateKeyEnv)
	}
	return Auth{AppID: appID, PrivateKey: key}, nil
}

// Replier posts turns' answers as issue or pull request comments, or pull
// request reviews. Its credentials come from the worker's environment.
type Replier struct {
	base  *url.URL
	token *gh.Client
	apps  *ghinstallation.AppsTransport
	http  *http.Transport

	mu      sync.Mutex
	clients map[int64]*gh.Client
	// Limit is the most characters of one comment (default MaxComment).
	Limit int
	// Answering is how a question comment says to answer it ("": reply
	// with a comment).
	Answering string
	// approvalKey binds approval tokens (approvalKey of the webhook
	// secret); without it the replier asks for no approval.
	approvalKey []byte
}

// NewReplier returns the replier of auth against apiURL ("" for
// https://api.github.com; GitHub Enterprise Server: https://<host>/api/v3).
func NewReplier(auth Auth, apiURL string) (*Replier, error) {
	if apiURL == "" {
		apiURL = "https://api.github.com/"
	}
	base, err := url.Parse(strings.TrimRight(apiURL, "/") + "/")
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("%s: %q is not a URL", APIURLEnv, apiURL)
	}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		ResponseHeaderTimeout: 30 * time.Second, IdleConnTimeout: 90 * time.Second}
	r := &Replier{base: base, http: tr, clients: map[int64]*gh.Client{}, Limit: MaxComment}
	switch {
	case auth.Token != "":
		r.token = r.client(&http.Client{Transport: tr, Timeout: time.Minute}).WithAuthToken(auth.Token)
	case auth.AppID != 0:
		apps, err := ghinstallation.NewAppsTransport(tr, auth.AppID, auth.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("github app private key: %w", err)
		}
		apps.BaseURL = strings.TrimRight(base.String(), "/")
		r.apps = apps
	default:
		return nil, errors.New("github: no token and no GitHub App")
	}
	return r, nil
}

func (r *Replier) client(hc *http.Client) *gh.Client {
	c := gh.NewClient(hc)
	u := *r.base
	c.BaseURL = &u
	return c
}

// clientFor is the API client of an installation (App auth: its tokens
// are cached and refreshed) or the token's.
func (r *Replier) clientFor(installation int64) (*gh.Client, error) {
	if r.token != nil {
		return r.token, nil
	}
	if installation == 0 {
		return nil, channels.Permanent(errors.New("github: the event has no App installation to reply as (set GITHUB_TOKEN, or install the App)"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[installation]; ok {
		return c, nil
	}
	itr := ghinstallation.NewFromAppsTransport(r.apps, installation)
	c := r.client(&http.Client{Transport: itr, Timeout: time.Minute})
	r.clients[installation] = c
	return c, nil
}

// Kind implements channels.Replier.
func (r *Replier) Kind() string { return Kind }

// Render implements channels.Replier. ref is "comment:<id>" or
// "review:<id>", the first part of the reply an earlier attempt posted.
func (r *Replier) Render(_ context.Context, t wire.Target, ref string) (channels.Render, error) {
	owner, repo, ok := strings.Cut(t.Chat, "/")
	number, err := strconv.Atoi(t.Thread)
	if !ok || owner == "" || repo == "" || err != nil || number <= 0 || t.Message == "" {
		return nil, channels.Permanent(fmt.Errorf("github: reply target needs owner/repo, number and turn, got %q #%q %q", t.Chat, t.Thread, t.Message))
	}
	var data targetData
	if len(t.Data) > 0 {
		if err := json.Unmarshal(t.Data, &data); err != nil {
			return nil, channels.Permanent(fmt.Errorf("github: reply data: %w", err))
		}
	}
	c, err := r.clientFor(data.Installation)
	if err != nil {
		return nil, err
	}
	rd := &render{api: c, owner: owner, repo: repo, number: number, key: t.Message, review: data.Review, limit: r.Limit}
	if ref != "" {
		kind, id, _ := strings.Cut(ref, ":")
		n, err := strconv.ParseInt(id, 10, 64)
		if (kind != refComment && kind != refReview) || err != nil {
			return nil, channels.Permanent(fmt.Errorf("github: bad reply reference %q", ref))
		}
		rd.review = kind == refReview
		rd.first, rd.ref = n, ref
	}
	return rd, nil
}

// Reference kinds.
const (
	refComment = "comment"
	refReview  = "review"
)

// render is one turn's reply: one comment (or review) per part.
type render struct {
	api         *gh.Client
	owner, repo string
	number      int
	key         string
	review      bool
	limit       int
	first       int64
	ref         string
	scanned     bool
	found       map[int]posted
}

type posted struct {
	id   int64
	body string
}

// Show implements channels.Render. GitHub has no live messages; the
// answer is posted once, by Finish.
func (m *render) Show(context.Context, *channels.View) error { return nil }

// Ref implements channels.Render.
func (m *render) Ref() string { return m.ref }

// Finish implements channels.Render: each part of text (split at the
// comment limit) is edited in place when it was posted before — found by
// the stored reference or by its marker among the issue's recent comments
// — and created otherwise.
func (m *render) Finish(ctx context.Context, text string) error {
	parts := Split(text, m.limit-len(Marker(m.key, 999))-2)
	for i, p := range parts {
		body := p + "\n\n" + Marker(m.key, i)
		var prev posted
		if i == 0 && m.first != 0 {
			prev.id = m.first
		} else {
			var err error
			if prev, err = m.find(ctx, i); err != nil {
				return err
			}
		}
		id, err := m.put(ctx, prev, body)
		if err != nil {
			return fmt.Errorf("github: reply part %d of %d: %w", i+1, len(parts), err)
		}
		if i == 0 && m.ref == "" {
			m.first = id
			kind := refComment
			if m.review {
				kind = refReview
			}
			m.ref = kind + ":" + strconv.FormatInt(id, 10)
		}
	}
	return nil
}

// put edits prev to body (unless it already is) or creates it.
func (m *render) put(ctx context.Context, prev posted, body string) (int64, error) {
	if prev.id != 0 && prev.body == body {
		return prev.id, nil
	}
	if m.review {
		if prev.id != 0 {
			_, _, err := m.api.PullRequests.UpdateReview(ctx, m.owner, m.repo, m.number, prev.id, body)
			return prev.id, classify(err)
		}
		rv, _, err := m.api.PullRequests.CreateReview(ctx, m.owner, m.repo, m.number,
			&gh.PullRequestReviewRequest{Body: gh.Ptr(body), Event: gh.Ptr("COMMENT")})
		if err != nil {
			return 0, classify(err)
		}
		return rv.GetID(), nil
	}
	if prev.id != 0 {
		_, _, err := m.api.Issues.EditComment(ctx, m.owner, m.repo, prev.id, &gh.IssueComment{Body: gh.Ptr(body)})
		return prev.id, classify(err)
	}
	c, _, err := m.api.Issues.CreateComment(ctx, m.owner, m.repo, m.number, &gh.IssueComment{Body: gh.Ptr(body)})
	if err != nil {
		return 0, classify(err)
	}
	return c.GetID(), nil
}

// find looks part up by its marker among the most recent comments (or
// reviews) of the issue; the list is read once per render.
func (m *render) find(ctx context.Context, part int) (posted, error) {
	if !m.scanned {
		if err := m.scan(ctx); err != nil {
			return posted{}, err
		}
		m.scanned = true
	}
	return m.found[part], nil
}

// scan reads the last scanPages pages of comments (or reviews) and keeps
// those carrying this turn's marker.
func (m *render) scan(ctx context.Context) error {
	m.found = map[int]posted{}
	page := func(p int) (int, error) {
		opts := gh.ListOptions{Page: p, PerPage: 100}
		var bodies []posted
		var resp *gh.Response
		var err error
		if m.review {
			var rs []*gh.PullRequestReview
			rs, resp, err = m.api.PullRequests.ListReviews(ctx, m.owner, m.repo, m.number, &opts)
			for _, r := range rs {
				bodies = append(bodies, posted{r.GetID(), r.GetBody()})
			}
		} else {
			var cs []*gh.IssueComment
			cs, resp, err = m.api.Issues.ListComments(ctx, m.owner, m.repo, m.number, &gh.IssueListCommentsOptions{ListOptions: opts})
			for _, c := range cs {
				bodies = append(bodies, posted{c.GetID(), c.GetBody()})
			}
		}
		if err != nil {
			return 0, classify(err)
		}
		for _, b := range bodies {
			for _, mm := range markerRE.FindAllStringSubmatch(b.body, -1) {
				if mm[1] != m.key {
					continue
				}
				if n, err := strconv.Atoi(mm[2]); err == nil {
					if _, dup := m.found[n]; !dup {
						m.found[n] = b
					}
				}
			}
		}
		return resp.LastPage, nil
	}
	last, err := page(1)
	if err != nil {
		return fmt.Errorf("github: list replies: %w", err)
	}
	for p := last; p > 1 && p > last-scanPages; p-- {
		if _, err := page(p); err != nil {
			return fmt.Errorf("github: list replies: %w", err)
		}
	}
	return nil
}

// classify marks API errors a retry cannot fix (not found, unprocessable,
// forbidden without a rate limit) as permanent.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var rl *gh.RateLimitError
	var ab *gh.AbuseRateLimitError
	if errors.As(err, &rl) || errors.As(err, &ab) {
		return err
	}
	var er *gh.ErrorResponse
	if errors.As(err, &er) && er.Response != nil {
		switch er.Response.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusGone:
			return channels.Permanent(err)
		}
	}
	return err
}

// Split cuts text into parts of at most limit characters (UTF-16 units)
// whose concatenation is text: after a line break when there is one in
// the last quarter of a part, never inside a character. An empty text is
// one empty part.
func Split(text string, limit int) []string {
	if limit < 16 {
		limit = 16
	}
	var parts []string
	for utf16Len(text) > limit {
		// The longest prefix within limit.
		cut, units := 0, 0
		for cut < len(text) {
			r, size := utf8.DecodeRuneInString(text[cut:])
			n := utf16.RuneLen(r)
			if n < 0 {
				n = 1
			}
			if units+n > limit {
				break
			}
			units += n
			cut += size
		}
		if nl := strings.LastIndexByte(text[:cut], '\n'); nl > 0 && nl >= cut*3/4 {
			cut = nl + 1
		}
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	return append(parts, text)
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if l := utf16.RuneLen(r); l > 0 {
			n += l
		} else {
			n++
		}
	}
	return n
}
