package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// RequestChatLink asks the ingress at base (its API's root, as the caller
// reaches it) for a one-time web chat link for the principal of token:
// POST <base>/chat/links. The answer's URL is rebuilt on base, so a link
// made through a proxy points where the caller reached the server.
func RequestChatLink(ctx context.Context, client *http.Client, base, token string, req ChatLinkRequest) (ChatLink, error) {
	var l ChatLink
	body, _ := json.Marshal(req)
	base = strings.TrimRight(base, "/")
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/chat/links", bytes.NewReader(body))
	if err != nil {
		return l, err
	}
	r.Header.Set("Content-Type", "application/json")
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(r)
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return l, fmt.Errorf("%s (HTTP %d)", e.Error, resp.StatusCode)
		}
		if resp.StatusCode == http.StatusNotFound {
			return l, fmt.Errorf("the server at %s serves no web chat (HTTP 404; is it an older fastagent?)", base)
		}
		return l, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &l); err != nil || l.Path == "" {
		return l, fmt.Errorf("unexpected answer from %s/chat/links", base)
	}
	l.URL = base + "/" + l.Path
	return l, nil
}
