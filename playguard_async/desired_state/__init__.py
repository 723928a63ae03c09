"""What the fleet should be: the model, the YAML source, the PostgreSQL source with its schema and
migrations, transfer between the two, and the observed state written back."""
