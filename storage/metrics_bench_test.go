package storage

import "testing"

func BenchmarkEncodeMetrics(b *testing.B) {
	m := map[string]float64{"epoch": 12, "train_loss": 0.123456789, "val_loss": 0.23456789, "val_acc": 0.9123456}
	b.ReportAllocs()
	for b.Loop() {
		encodeMetrics(m)
	}
}
