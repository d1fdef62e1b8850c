"""The serving side of worker calls: admitted, recorded, dispatched and awaited in a daphne process."""
