package mlflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Settings say where and as whom to log. The zero value logs nowhere.
type Settings struct {
	// TrackingURI is the server's base URL, http or https, e.g.
	// http://127.0.0.1:5000.
	TrackingURI string
	// Experiment is the MLflow experiment's name; "" means the gotune
	// experiment's name.
	Experiment string
	// Token, when set, is sent as a bearer token; otherwise Username and
	// Password, when set, as HTTP basic authentication.
	Token              string
	Username, Password string
}

// FromEnv returns s with MLflow's environment variables applied over it:
// MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME, MLFLOW_TRACKING_TOKEN,
// MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD. A variable that is
// unset or empty leaves the setting as it is.
func (s Settings) FromEnv() Settings {
	for _, v := range []struct {
		name string
		to   *string
	}{
		{"MLFLOW_TRACKING_URI", &s.TrackingURI},
		{"MLFLOW_EXPERIMENT_NAME", &s.Experiment},
		{"MLFLOW_TRACKING_TOKEN", &s.Token},
		{"MLFLOW_TRACKING_USERNAME", &s.Username},
		{"MLFLOW_TRACKING_PASSWORD", &s.Password},
	} {
		if x := os.Getenv(v.name); x != "" {
			*v.to = x
		}
	}
	return s
}

// Enabled is whether s names a tracking server.
func (s Settings) Enabled() bool { return s.TrackingURI != "" }

// CheckURI checks a tracking URI: gotune speaks MLflow's REST API, so it
// must be an http or https URL with a host.
func CheckURI(uri string) error {
	u, err := url.Parse(uri)
	if err != nil {
		return fmt.Errorf("tracking URI %q: %w", uri, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("tracking URI %q: want the http:// or https:// address of an MLflow tracking server", uri)
	}
	return nil
}

// Client makes MLflow REST API calls, one attempt each; the Tracker retries.
type Client struct {
	base  string // without a trailing slash
	s     Settings
	httpc *http.Client
}

// NewClient returns a client of the server s names. Each request times out
// after timeout (0: 30 seconds).
func NewClient(s Settings, timeout time.Duration) (*Client, error) {
	if err := CheckURI(s.TrackingURI); err != nil {
		return nil, err
	}
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	u, _ := url.Parse(s.TrackingURI)
	if u.User != nil {
		// Credentials in the URI count as basic authentication.
		if s.Username == "" {
			s.Username = u.User.Username()
			s.Password, _ = u.User.Password()
		}
		u.User = nil
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), s: s, httpc: &http.Client{Timeout: timeout}}, nil
}

// URI is the server's address, without credentials.
func (c *Client) URI() string { return c.base }

// APIError is an answer of the server other than success.
type APIError struct {
	// Endpoint is the API path called, e.g. "runs/log-batch".
	Endpoint string
	// Status is the HTTP status code.
	Status int
	// Code and Message are MLflow's error_code and message, when the body
	// holds them.
	Code, Message string
}

func (e *APIError) Error() string {
	msg := e.Message
	if e.Code != "" {
		msg = e.Code + ": " + msg
	}
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("%s: HTTP %d: %s", e.Endpoint, e.Status, msg)
}

// Rejected is whether the server refused the request itself, so that
// sending it again cannot succeed: a 4xx status other than 401, 403 (wrong
// credentials, which the user may fix), 408 and 429 (a busy server).
func (e *APIError) Rejected() bool {
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return e.Status >= 400 && e.Status < 500
}

// rejected is whether err is an *APIError that Rejected.
func rejected(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Rejected()
}

// call sends in as JSON to endpoint (GET with query when in is url.Values)
// and decodes the answer into out, when not nil.
func (c *Client) call(ctx context.Context, endpoint string, in, out any) error {
	u := c.base + "/api/2.0/mlflow/" + endpoint
	var req *http.Request
	var err error
	if q, ok := in.(url.Values); ok {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u+"?"+q.Encode(), nil)
	} else {
		var body []byte
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s: encode request: %w", endpoint, err)
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return err
	}
	switch {
	case c.s.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.s.Token)
	case c.s.Username != "" || c.s.Password != "":
		req.SetBasicAuth(c.s.Username, c.s.Password)
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: read answer: %w", endpoint, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Endpoint: endpoint, Status: resp.StatusCode}
		var m struct {
			Code    string `json:"error_code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(body, &m) == nil {
			e.Code, e.Message = m.Code, m.Message
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s: decode answer: %w", endpoint, err)
	}
	return nil
}

// ExperimentID returns the id of the experiment named name, creating it
// when the server has none.
func (c *Client) ExperimentID(ctx context.Context, name string) (string, error) {
	var got struct {
		Experiment struct {
			ID string `json:"experiment_id"`
		} `json:"experiment"`
	}
	err := c.call(ctx, "experiments/get-by-name", url.Values{"experiment_name": {name}}, &got)
	var ae *APIError
	switch {
	case err == nil:
		return got.Experiment.ID, nil
	case !errors.As(err, &ae) || ae.Code != "RESOURCE_DOES_NOT_EXIST":
		return "", err
	}
	var created struct {
		ID string `json:"experiment_id"`
	}
	err = c.call(ctx, "experiments/create", map[string]string{"name": name}, &created)
	if errors.As(err, &ae) && ae.Code == "RESOURCE_ALREADY_EXISTS" {
		// Another client created it meanwhile.
		return c.ExperimentID(ctx, name)
	}
	return created.ID, err
}

// CreateRun starts a run in experiment expID and returns its id.
func (c *Client) CreateRun(ctx context.Context, expID, name string, start time.Time, tags []Tag) (string, error) {
	var got struct {
		Run struct {
			Info struct {
				ID string `json:"run_id"`
			} `json:"info"`
		} `json:"run"`
	}
	tags = append([]Tag{{Key: "mlflow.runName", Value: name}}, tags...)
	err := c.call(ctx, "runs/create", map[string]any{
		"experiment_id": expID, "run_name": name, "start_time": start.UnixMilli(), "tags": tags,
	}, &got)
	if err == nil && got.Run.Info.ID == "" {
		err = errors.New("runs/create: the answer holds no run id")
	}
	return got.Run.Info.ID, err
}

// LogBatch sends b to run runID; b must be within the server's limits
// (see Pack).
func (c *Client) LogBatch(ctx context.Context, runID string, b Batch) error {
	return c.call(ctx, "runs/log-batch", b.request(runID), nil)
}

// EndRun sets run runID's final status (FINISHED, KILLED or FAILED) and
// end time.
func (c *Client) EndRun(ctx context.Context, runID, status string, end time.Time) error {
	return c.call(ctx, "runs/update", map[string]any{"run_id": runID, "status": status, "end_time": end.UnixMilli()}, nil)
}

// Metric is one value of a run's metric; Timestamp is in milliseconds
// since 1970.
type Metric struct {
	Key       string `json:"key"`
	Value     Value  `json:"value"`
	Timestamp int64  `json:"timestamp"`
	Step      int64  `json:"step"`
}

// Value is a metric's value: JSON cannot hold NaN or infinities, so they
// are sent as MLflow's JSON API reads them, the strings "NaN", "Infinity"
// and "-Infinity".
type Value float64

// MarshalJSON implements json.Marshaler.
func (v Value) MarshalJSON() ([]byte, error) {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Infinity"`), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// Param is one of a run's params.
type Param struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Tag is one of a run's tags.
type Tag struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}
