"""Pure domain types: states, failure reasons, limits and the records that cross layers."""
