package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// SampleQuerier is a backend that can return a metric's samples over a window, one per step:
// what the mann-whitney judge compares. A backend without it can be judged by ratio only.
type SampleQuerier interface {
	QueryRange(ctx context.Context, query string, window, step time.Duration) ([]float64, error)
}

// CanSample reports whether a backend returns samples (implements SampleQuerier).
func CanSample(backend any) bool {
	_, ok := backend.(SampleQuerier)
	return ok
}

// QueryRange runs a range query over the last window, one point per step (window/step points,
// the last one now), and returns the
// finite values of its single series (NaN points, steps without traffic, are left out). An
// empty result is ErrNoValues; several series, or a refused query, are ErrQuery.
func (c *Client) QueryRange(ctx context.Context, q string, window, step time.Duration) ([]float64, error) {
	if step <= 0 || window < step {
		return nil, queryErrorf("range query: the window (%s) must hold at least one step (%s)", window, step)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	end := time.Now()
	result, _, _, err := c.api.QueryRange(ctx, q, promv1.Range{Start: end.Add(step - window), End: end, Step: step})
	if err != nil {
		return nil, queryErrorf("prometheus %s: %w", redactURL(c.address), err)
	}
	matrix, ok := result.(model.Matrix)
	if !ok {
		return nil, queryErrorf("the range query returned a %s; a judged metric's query must return one series", result.Type())
	}
	switch len(matrix) {
	case 0:
		return nil, fmt.Errorf("%w: the range query returned no series", ErrNoValues)
	case 1:
	default:
		return nil, queryErrorf("the range query returned %d series; a metric query must aggregate them into one (for example with sum)", len(matrix))
	}
	var out []float64
	for _, p := range matrix[0].Values {
		if v := float64(p.Value); !math.IsNaN(v) && !math.IsInf(v, 0) {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(ErrNoValues, errors.New("every sample of the range query was NaN or infinite"))
	}
	return out, nil
}
