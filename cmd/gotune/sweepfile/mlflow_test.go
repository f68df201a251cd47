package sweepfile

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeMLflow(t *testing.T) {
	s, err := DecodeSweep("sweep.toml", []byte(valid+"\n[mlflow]\ntracking_uri = \"http://127.0.0.1:5000\"\nexperiment = \"digits tuning\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.MLflow != (MLflow{TrackingURI: "http://127.0.0.1:5000", Experiment: "digits tuning"}) || s.Config.Name != "digits" {
		t.Errorf("decoded %+v", s)
	}
	if s, err := DecodeSweep("sweep.toml", []byte(valid)); err != nil || s.MLflow != (MLflow{}) {
		t.Errorf("without [mlflow]: %+v, %v", s.MLflow, err)
	}
}

// TestDecodeMLflowErrors checks that each mistake in [mlflow] names the
// file, the line and the key; its first key is on line 25.
func TestDecodeMLflowErrors(t *testing.T) {
	for _, tt := range []struct {
		name, section string
		line          int
		key, msg      string
	}{
		{"unknown key", "tracking_url = \"http://h:5000\"", 25, "mlflow.tracking_url", "unknown key"},
		{"wrong type", "tracking_uri = 5000", 25, "mlflow.tracking_uri", "want a string"},
		{"not http", "tracking_uri = \"file:///tmp/mlruns\"", 25, "mlflow.tracking_uri", "want the http:// or https:// address"},
		{"no host", "tracking_uri = \"http://\"", 25, "mlflow.tracking_uri", "want the http:// or https:// address"},
		{"empty experiment", "tracking_uri = \"http://h:5000\"\nexperiment = \"\"", 26, "mlflow.experiment", "must not be empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSweep("sweep.toml", []byte(valid+"\n[mlflow]\n"+tt.section+"\n"))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.File != "sweep.toml" || e.Line != tt.line || e.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v (line %d, key %q); want line %d, key %q, mentioning %q", err, e.Line, e.Key, tt.line, tt.key, tt.msg)
			}
			// Load, which only wants the tuner's configuration, refuses it too.
			if _, err := Decode("sweep.toml", []byte(valid+"\n[mlflow]\n"+tt.section+"\n")); err == nil {
				t.Error("Decode accepts it")
			}
		})
	}
}
