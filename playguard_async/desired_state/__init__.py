"""What the fleet should be. ``model`` holds the Inventory and its records; ``source`` the protocol
every source meets and the optional abilities a source declares; ``yaml_source`` the inventory
file; ``postgres`` the database (source, mapping, schema and migrations, triggers, transfer to and
from YAML, the observed state written back, ``playguard db check``); ``registry`` maps the
``desired_state`` setting to one of them; ``windows`` the maintenance windows."""
