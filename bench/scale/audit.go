package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// auditPolicy logs every request at Metadata level, once, when its response is complete: who
// (user), what (verb, resource, name) and how it ended (code), with the time it was received.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
`

// request is one audited API request of the manager.
type request struct {
	received    time.Time
	latency     time.Duration // in the API server, receive to response complete
	verb        string
	resource    string // e.g. "pvcbackups", "pvcbackups/status"
	namespace   string
	name        string
	code        int
	userAgent   string
	subresource string
}

// write tells whether the request changes state in etcd.
func (r request) write() bool {
	switch r.verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// auditLog follows the API server's audit log and keeps the requests of one user.
type auditLog struct {
	path, user string
	mu         sync.Mutex
	offset     int64
	partial    []byte
	requests   []request
}

type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent  string `json:"userAgent"`
	RequestURI string `json:"requestURI"`
	ObjectRef  *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// read takes in what the API server appended since the last call.
func (a *auditLog) read() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		a.offset += int64(len(line))
		if err == io.EOF {
			a.partial = append(a.partial, line...)
			return nil
		} else if err != nil {
			return err
		}
		if len(a.partial) > 0 {
			line = append(a.partial, line...)
			a.partial = nil
		}
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("audit log line: %w", err)
		}
		if ev.User.Username != a.user {
			continue
		}
		req := request{received: ev.RequestReceivedTimestamp, verb: ev.Verb, userAgent: ev.UserAgent,
			latency: ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp)}
		if strings.Contains(ev.RequestURI, "dryRun=All") {
			req.verb = "dry-run " + req.verb // validated, never stored: not a write
		}
		if o := ev.ObjectRef; o != nil {
			req.resource, req.namespace, req.name, req.subresource = o.Resource, o.Namespace, o.Name, o.Subresource
			if o.Subresource != "" {
				req.resource += "/" + o.Subresource
			}
		}
		if req.resource == "" { // discovery and other non-resource URLs
			req.resource = strings.SplitN(ev.RequestURI, "?", 2)[0]
		}
		if ev.ResponseStatus != nil {
			req.code = ev.ResponseStatus.Code
		}
		a.requests = append(a.requests, req)
	}
}

// between returns the requests received in [from, to).
func (a *auditLog) between(from, to time.Time) ([]request, error) {
	if err := a.read(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []request
	for _, r := range a.requests {
		if !r.received.Before(from) && r.received.Before(to) {
			out = append(out, r)
		}
	}
	return out, nil
}

// requestStats summarises requests over n objects.
type requestStats struct {
	Total       int            `json:"total"`
	PerObject   float64        `json:"perObject"`
	ByVerb      map[string]int `json:"byVerb"`
	Writes      map[string]int `json:"writes"` // "verb resource" -> count
	NotFound    map[string]int `json:"notFound"`
	ByVerbRes   map[string]int `json:"byVerbResource"`
	WatchesOpen int            `json:"watches"`
	// MeanLatency is the API server's mean time to answer the requests (watches excluded).
	MeanLatency time.Duration `json:"meanLatency"`
}

func summarise(reqs []request, n int) requestStats {
	s := requestStats{ByVerb: map[string]int{}, Writes: map[string]int{}, NotFound: map[string]int{}, ByVerbRes: map[string]int{}}
	for _, r := range reqs {
		if r.verb == "watch" {
			s.WatchesOpen++
			continue // a watch is one long request, counted apart
		}
		s.Total++
		s.MeanLatency += r.latency
		s.ByVerb[r.verb]++
		key := r.verb + " " + r.resource
		s.ByVerbRes[key]++
		if r.write() {
			s.Writes[key]++
		}
		if r.code == 404 {
			s.NotFound[key]++
		}
	}
	if n > 0 {
		s.PerObject = float64(s.Total) / float64(n)
	}
	if s.Total > 0 {
		s.MeanLatency /= time.Duration(s.Total)
	}
	return s
}

// perObject renders counts divided by n, largest first, e.g. "patch pvcbackups/status 1.00".
func perObject(m map[string]int, n int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var b strings.Builder
	rare := 0 // requests of kinds below 0.01 per object (discovery, the webhook's CRD checks)
	for _, k := range keys {
		per := float64(m[k]) / float64(max(n, 1))
		if per < 0.005 {
			rare += m[k]
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f", k, per)
	}
	if rare > 0 {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d others", rare)
	}
	return b.String()
}
