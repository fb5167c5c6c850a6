package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Paths of the fake's file endpoints (not Web API methods).
const (
	downloadPath = "/files-pri/"
	uploadPath   = "/upload/"
)

// File is a file the fake serves: files.info describes it and its
// url_private_download serves Data.
type File struct {
	ID       string
	Name     string
	Mimetype string
	Data     []byte
	// Size overrides the size files.info reports (0: len(Data)).
	Size int
	// URL overrides url_private_download (another host, for tests of the
	// host restriction).
	URL string
	// RedirectTo makes the download answer 302 to this URL.
	RedirectTo string
	// Stall makes the download hang until the client gives up.
	Stall bool
}

// Download is one request the fake's download endpoint received.
type Download struct {
	FileID string
	// Authorization is the request's Authorization header.
	Authorization string
}

// Upload is a file uploaded with the external upload protocol.
type Upload struct {
	ID       string
	Filename string
	Length   string
	// Data is what was POSTed to the upload URL (nil until then).
	Data []byte
	// Authorization is the upload request's Authorization header.
	Authorization string
	// Set by files.completeUploadExternal.
	Completed bool
	Title     string
	Channel   string
	Thread    string
	Comment   string
}

// files is the fake's file state.
type files struct {
	mu        sync.Mutex
	byID      map[string]File
	downloads []Download
	uploads   []*Upload
}

func newFiles() *files { return &files{byID: map[string]File{}} }

// routes serves the download and upload endpoints before the Web API.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(downloadPath, s.serveDownload)
	mux.HandleFunc(uploadPath, s.serveUpload)
	mux.HandleFunc("/", s.serve)
	return mux
}

// AddFile makes f known to files.info and downloadable; it returns f with
// its download URL set.
func (s *Server) AddFile(f File) File {
	if f.URL == "" {
		f.URL = s.URL + downloadPath + f.ID + "/" + f.Name
	}
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	s.files.byID[f.ID] = f
	return f
}

// Downloads returns the download requests received.
func (s *Server) Downloads() []Download {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	return append([]Download(nil), s.files.downloads...)
}

// Uploads returns the files uploaded (or being uploaded), oldest first.
func (s *Server) Uploads() []Upload {
	s.files.mu.Lock()
	defer s.files.mu.Unlock()
	out := make([]Upload, 0, len(s.files.uploads))
	for _, u := range s.files.uploads {
		out = append(out, *u)
	}
	return out
}

func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request) {
	id, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, downloadPath), "/")
	fs := s.files
	fs.mu.Lock()
	fs.downloads = append(fs.downloads, Download{FileID: id, Authorization: r.Header.Get("Authorization")})
	f, ok := fs.byID[id]
	fs.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
	case f.RedirectTo != "":
		http.Redirect(w, r, f.RedirectTo, http.StatusFound)
	case f.Stall:
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	default:
		w.Header().Set("Content-Type", f.Mimetype)
		_, _ = w.Write(f.Data)
	}
}

func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, uploadPath)
	var data []byte
	if file, _, err := r.FormFile("file"); err == nil {
		data, _ = io.ReadAll(file)
		_ = file.Close()
	} else {
		data, _ = io.ReadAll(r.Body)
	}
	fs := s.files
	fs.mu.Lock()
	var up *Upload
	for _, u := range fs.uploads {
		if u.ID == id {
			up = u
		}
	}
	if up != nil {
		up.Data, up.Authorization = data, r.Header.Get("Authorization")
	}
	fs.mu.Unlock()
	if up == nil {
		http.NotFound(w, r)
		return
	}
	_, _ = fmt.Fprintf(w, "OK - %d", len(data))
}

// fileJSON is a file as files.info describes it.
func fileJSON(f File) map[string]any {
	size := f.Size
	if size == 0 {
		size = len(f.Data)
	}
	return map[string]any{"id": f.ID, "name": f.Name, "title": f.Name, "mimetype": f.Mimetype, "size": size,
		"mode": "hosted", "url_private": f.URL, "url_private_download": f.URL}
}

// fileMethods are the Web API methods of files, added to defaults by New.
var fileMethods = map[string]Handler{
	"files.info": func(s *Server, c Call) map[string]any {
		s.files.mu.Lock()
		f, ok := s.files.byID[c.Get("file")]
		for _, u := range s.files.uploads {
			if !ok && u.ID == c.Get("file") {
				// An uploaded file: shared in its channel once completed.
				defer s.files.mu.Unlock()
				chans := []string{}
				if u.Completed {
					chans = append(chans, u.Channel)
				}
				return map[string]any{"file": map[string]any{"id": u.ID, "name": u.Filename, "title": u.Title,
					"size": len(u.Data), "channels": chans}, "comments": []any{}, "paging": map[string]any{}}
			}
		}
		s.files.mu.Unlock()
		if !ok {
			return map[string]any{"ok": false, "error": "file_not_found"}
		}
		return map[string]any{"file": fileJSON(f), "comments": []any{}, "paging": map[string]any{}}
	},
	"files.getUploadURLExternal": func(s *Server, c Call) map[string]any {
		id := fmt.Sprintf("FUP%06d", s.nextSeq())
		s.files.mu.Lock()
		s.files.uploads = append(s.files.uploads, &Upload{ID: id, Filename: c.Get("filename"), Length: c.Get("length")})
		s.files.mu.Unlock()
		return map[string]any{"upload_url": s.URL + uploadPath + id, "file_id": id}
	},
	"files.completeUploadExternal": func(s *Server, c Call) map[string]any {
		var list []struct {
			ID    string `json:"id"`
			Title string `json:"title"`
		}
		if err := json.Unmarshal([]byte(c.Get("files")), &list); err != nil || len(list) == 0 {
			return map[string]any{"ok": false, "error": "invalid_arguments"}
		}
		var out []map[string]any
		s.files.mu.Lock()
		defer s.files.mu.Unlock()
		for _, l := range list {
			var up *Upload
			for _, u := range s.files.uploads {
				if u.ID == l.ID {
					up = u
				}
			}
			if up == nil || up.Data == nil {
				return map[string]any{"ok": false, "error": "file_not_found"}
			}
			up.Completed, up.Title = true, l.Title
			up.Channel, up.Thread, up.Comment = c.Get("channel_id"), c.Get("thread_ts"), c.Get("initial_comment")
			out = append(out, map[string]any{"id": up.ID, "title": l.Title})
		}
		return map[string]any{"files": out}
	},
}

func (s *Server) nextSeq() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}
