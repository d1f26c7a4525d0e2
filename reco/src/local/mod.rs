//! Local reconstruction: raw FED data → digis → clusters → rec hits.
