"""What the SQL drivers share that is not dialect: query files, the JSON and row
codecs, stats folding, and the rules of batch rows."""
