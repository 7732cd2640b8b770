package testredis

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gomodule/redigo/redis"
)

// Error is redigo's error type, the one an error reply comes back as.
type Error = redis.Error

// Int64 runs one command and reads its reply as an integer.
func (s *Server) Int64(name string, args ...any) (int64, error) {
	return redis.Int64(s.Do(name, args...))
}

// Int64s runs one command and reads its reply as integers.
func (s *Server) Int64s(name string, args ...any) ([]int64, error) {
	return redis.Int64s(s.Do(name, args...))
}

// Text runs one command and reads its reply as a string.
func (s *Server) Text(name string, args ...any) (string, error) {
	return redis.String(s.Do(name, args...))
}

// Strings runs one command and reads its reply as strings.
func (s *Server) Strings(name string, args ...any) ([]string, error) {
	return redis.Strings(s.Do(name, args...))
}

// Bytes runs one command and reads its reply as bytes.
func (s *Server) Bytes(name string, args ...any) ([]byte, error) {
	return redis.Bytes(s.Do(name, args...))
}

// Scores is the key's members and their scores, oldest first (ZRANGE WITHSCORES).
func (s *Server) Scores(key string) ([]string, []int64, error) {
	v, err := s.Strings("ZRANGE", key, 0, -1, "WITHSCORES")
	if err != nil {
		return nil, nil, err
	}
	var names []string
	var scores []int64
	for i := 0; i < len(v); i += 2 {
		score, err := strconv.ParseInt(v[i+1], 10, 64)
		if err != nil {
			return nil, nil, err
		}
		names = append(names, v[i])
		scores = append(scores, score)
	}
	return names, scores, nil
}

// CPUSeconds is the server's CPU time so far, system and user (INFO cpu).
func (s *Server) CPUSeconds() (float64, error) {
	info, err := s.Text("INFO", "cpu")
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, line := range strings.Split(info, "\r\n") {
		for _, field := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, field); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu: %q: %w", line, err)
				}
				total += f
			}
		}
	}
	return total, nil
}
