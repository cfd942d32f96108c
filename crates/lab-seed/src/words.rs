//! Word lists for the name generators (`names.rs`), kept apart so rustfmt can leave these tables
//! in dense rows (`#[rustfmt::skip]` on the module) instead of one word per line.
//!
//! Rules, checked by the tests in `names.rs`: every word starts with a capital letter, has no
//! digit, is not a legal suffix or a location marker of lab-api (outside the slots meant for
//! them), and is not a leading stopword or connector.

use super::names::OrgStyle;

/// Titles that may precede a person's name in a document (gender-neutral, so never wrong).
pub(crate) const TITLES: &[&str] = &["Dr", "Prof"];

/// Middle initials for English names (any capital works inside a name; "A" only first is a
/// stopword).
pub(crate) const INITIALS: &[&str] = &[
    "A", "B", "C", "D", "E", "F", "G", "H", "J", "K", "L", "M", "N", "P", "R", "S", "T", "W",
];

pub(crate) const EDITIONS: &[&str] = &["Pro", "Max", "Plus", "Lite", "Mini", "Ultra", "Air", "Neo", "Prime"];

pub(crate) const MODEL_LETTERS: &[&str] = &["C", "E", "G", "K", "M", "R", "S", "T", "X", "Z"];

pub(crate) const EN_ORG: OrgStyle = OrgStyle {
    stems: EN_ORG_STEMS,
    descriptors: &[
        "Logistics", "Analytics", "Capital", "Foods", "Energy", "Software", "Medical", "Freight",
        "Consulting", "Insurance", "Pharma", "Media", "Robotics", "Materials", "Textiles",
        "Aerospace", "Biotech", "Brewing", "Chemicals", "Construction", "Dynamics", "Electric",
        "Engineering", "Financial", "Health", "Instruments", "Leasing", "Marine", "Metals",
        "Mining", "Networks", "Packaging", "Plastics", "Realty", "Semiconductors", "Shipping",
        "Solar", "Steel", "Telecom", "Ventures", "Water", "Wireless",
    ],
    suffixes: &["Inc", "Ltd", "LLC", "PLC", "Corp", "Group", "Holdings", "Partners"],
    // Inc/Ltd/LLC dominate; the rest give the suffix-swap variants somewhere to go.
    suffix_weights: &[30, 25, 20, 5, 8, 6, 4, 2],
    pair_connector: Some("&"),
    family: Some("& Sons"),
    qualifiers: &[
        "Pacific", "Atlantic", "Northern", "Southern", "Eastern", "Western", "Central", "Global",
        "United", "National", "Continental", "Coastal", "Metro", "Allied", "First", "Premier",
    ],
};

pub(crate) const EN_ORG_STEMS: &[&str] = &[
    "Northwind", "Bluewater", "Harrington", "Acorn", "Summit", "Redwood", "Kestrel", "Ashford",
    "Blackstone", "Brightwater", "Cobalt", "Crestview", "Driftwood", "Evergreen", "Fairfax",
    "Granite", "Greystone", "Hawthorne", "Highgate", "Ironbridge", "Juniper", "Kingsley",
    "Lakeside", "Larkspur", "Meridian", "Millbrook", "Northgate", "Oakridge", "Pinecrest",
    "Ravenswood", "Rockwell", "Sterling", "Stonebridge", "Thornton", "Trident", "Vantage",
    "Westbrook", "Whitfield", "Windmill", "Yardley", "Alder", "Beacon", "Birchwood", "Caldwell",
    "Carrington", "Clearwater", "Copperfield", "Dunmore", "Eastwood", "Elmstead", "Foxglove",
    "Glenwood", "Hartwell", "Holloway", "Keystone", "Lambert", "Langley", "Linden", "Marlow",
    "Mercer", "Newbury", "Oakley", "Pembroke", "Prescott", "Radcliffe", "Sherwood", "Silverline",
    "Stanton", "Tamarack", "Thistle", "Wexford", "Whitmore", "Wilton", "Winslow", "Ashbury",
    "Bramley", "Chester", "Dalton", "Everett", "Fulton", "Garrison", "Hadley", "Ingram", "Jasper",
    "Kendall", "Lockwood", "Maddox", "Norwood", "Osborne", "Quincy", "Rutherford", "Sutton",
    "Talbot", "Upton", "Vaughn", "Warwick", "Yates", "Bellamy", "Cromwell", "Dorsey",
];

pub(crate) const DE_ORG: OrgStyle = OrgStyle {
    stems: DE_SURNAMES,
    descriptors: &[
        "Logistik", "Maschinenbau", "Versicherungen", "Bauwerke", "Lebensmittel",
        "Elektrotechnik", "Spedition", "Stahlbau", "Verlag", "Brauerei", "Holzbau",
        "Kältetechnik", "Gerätebau", "Textilwerke", "Anlagenbau", "Feinmechanik", "Metallwerke",
        "Druckerei", "Möbelwerke", "Getränke", "Umwelttechnik", "Medizintechnik", "Software",
        "Energie", "Immobilien", "Chemie", "Pharma", "Fahrzeugbau", "Landtechnik", "Glaswerke",
        "Präzisionstechnik", "Wärmetechnik", "Kunststoffe", "Verpackungen", "Handelshaus",
    ],
    suffixes: &["GmbH", "AG", "KG", "SE"],
    suffix_weights: &[55, 22, 15, 8],
    pair_connector: Some("&"),
    family: Some("& Söhne"),
    qualifiers: &[],
};

pub(crate) const DE_SURNAMES: &[&str] = &[
    "Müller", "Schäfer", "Brückner", "Köhler", "Weiß", "Fröhlich", "Becker", "Hoffmann",
    "Schröder", "Krüger", "Wagner", "Schulz", "Zimmermann", "Braun", "Hartmann", "Lange",
    "Werner", "Krause", "Lehmann", "Schmitt", "Günther", "Böhm", "Jäger", "Vogel", "Friedrich",
    "Keller", "Groß", "Seidel", "Dietrich", "Ziegler", "Kühn", "Pohl", "Engel", "Horn", "Busch",
    "Bergmann", "Voigt", "Sauer", "Arnold", "Wolff", "Pfeiffer", "Lorenz", "Förster", "Kaiser",
    "Fuchs", "Scholz", "Möller", "Lindner", "Ebert", "Winkler", "Haas", "Schuster", "Heinrich",
    "Stein", "Bauer", "Richter", "Neumann", "Schwarz", "Kraus", "Roth", "Beck", "Lang", "Frank",
    "Albrecht", "Ludwig", "Böttcher", "Thiele", "Löffler", "Kästner", "Nägele", "Hübner",
    "Mößner", "Dörr", "Wüst", "Sänger", "Gärtner", "Schmidt", "Fischer", "Weber", "Meyer",
    "Wolf", "Schneider", "Hofmann", "Schütz", "Reuter", "Walther",
];

pub(crate) const FR_ORG: OrgStyle = OrgStyle {
    stems: FR_SURNAMES,
    descriptors: &[
        "Transports", "Énergie", "Électricité", "Assurances", "Télécom", "Bâtiment", "Pharmacie",
        "Conseil", "Distribution", "Métallurgie", "Aéronautique", "Chimie", "Céramiques",
        "Verrerie", "Imprimerie", "Logistique", "Environnement", "Ingénierie", "Informatique",
        "Alimentaire", "Papeterie", "Textiles", "Vins", "Fromageries", "Immobilier",
    ],
    suffixes: &["SA", "SARL", "SAS"],
    suffix_weights: &[40, 35, 25],
    pair_connector: Some("et"),
    family: Some("et Fils"),
    qualifiers: &["Groupe", "Compagnie", "Établissements"],
};

pub(crate) const FR_SURNAMES: &[&str] = &[
    "Lefèvre", "Dubois", "Beaulieu", "Mérieux", "Girard", "Moreau", "Laurent", "Lefebvre",
    "Fournier", "Rousseau", "Bonnet", "Chevalier", "Faure", "Gauthier", "Perrin", "Roussel",
    "Mercier", "Blanchard", "Guérin", "Boyer", "Garnier", "Chauvin", "Lemaître", "Bérard",
    "Delacroix", "Fontaine", "Marchand", "Dufour", "Brunet", "Noël", "Rivière", "Lacroix",
    "Bertrand", "Clément", "Hébert", "Maréchal", "Rémy", "Thénard", "Vallée", "Écuyer", "Ménard",
    "Pelletier", "Carré", "Barbier", "Leroy", "Aubert", "Caron", "Bouvier", "Charpentier",
    "Deschamps", "Fabre", "Gaillard", "Durand", "Martin", "Bernard", "Petit", "Robert",
    "Richard", "Simon", "Michel", "Lemoine", "Picard", "Rolland", "Hamon", "Joly",
];

pub(crate) const ES_ORG: OrgStyle = OrgStyle {
    stems: ES_SURNAMES,
    descriptors: &[
        "Construcciones", "Logística", "Alimentación", "Inversiones", "Distribuciones", "Energía",
        "Seguros", "Ingeniería", "Telecomunicaciones", "Farmacéutica", "Transportes", "Hostelería",
        "Inmobiliaria", "Aceites", "Vinos", "Textil", "Conservas", "Maderas", "Cerámica",
        "Automoción", "Minería", "Metalúrgica", "Consultoría", "Tecnologías", "Renovables",
    ],
    suffixes: &["SL", "SA"],
    suffix_weights: &[65, 35],
    pair_connector: Some("y"),
    family: Some("Hermanos"),
    qualifiers: &["Grupo", "Industrias", "Talleres"],
};

pub(crate) const ES_SURNAMES: &[&str] = &[
    "García", "Martínez", "Peñalver", "Ibáñez", "Castillo", "Núñez", "Fernández", "González",
    "Rodríguez", "López", "Sánchez", "Pérez", "Gómez", "Díaz", "Moreno", "Muñoz", "Álvarez",
    "Romero", "Alonso", "Gutiérrez", "Navarro", "Torres", "Domínguez", "Vázquez", "Ramos", "Gil",
    "Ramírez", "Serrano", "Blanco", "Molina", "Morales", "Suárez", "Ortega", "Delgado", "Castro",
    "Ortiz", "Rubio", "Marín", "Sanz", "Iglesias", "Medina", "Garrido", "Cortés", "Santos",
    "Guerrero", "Lozano", "Cano", "Prieto", "Méndez", "Calvo", "Gallego", "Vidal", "León",
    "Herrera", "Peña", "Cabrera", "Campos", "Fuentes", "Carrasco", "Aguilar", "Pascual",
    "Requena", "Jiménez", "Hernández", "Ruiz", "Mora", "Soler", "Bravo", "Vicente", "Arias",
];

pub(crate) const JP_ORG: OrgStyle = OrgStyle {
    stems: JP_CORP_STEMS,
    descriptors: &[
        "Shoji", "Seiko", "Denki", "Kogyo", "Sangyo", "Tsusho", "Kensetsu", "Seiyaku", "Unyu",
        "Kagaku", "Seimitsu", "Shokuhin", "Tekko", "Zosen", "Butsuryu", "Kikai", "Densetsu",
        "Kasei", "Boeki", "Jidosha", "Shuzo", "Tsushin", "Gomu", "Seishi",
    ],
    // "Co Ltd" is how Japanese firms style themselves in English-language contracts.
    suffixes: &["KK", "Holdings", "Co Ltd"],
    suffix_weights: &[70, 12, 18],
    pair_connector: None,
    family: None,
    qualifiers: &["Nippon", "Dai", "Shin"],
};

pub(crate) const JP_CORP_STEMS: &[&str] = &[
    "Tanaka", "Yamamoto", "Suzuki", "Matsumoto", "Nakamura", "Kobayashi", "Fujimoto", "Hoshino",
    "Takeda", "Mitsuboshi", "Sato", "Watanabe", "Kato", "Yoshida", "Yamada", "Sasaki",
    "Yamaguchi", "Inoue", "Kimura", "Hayashi", "Shimizu", "Yamazaki", "Ikeda", "Hashimoto",
    "Ishikawa", "Ogawa", "Okada", "Hasegawa", "Murakami", "Kondo", "Sakamoto", "Aoki", "Fujii",
    "Nishimura", "Fukuda", "Miura", "Okamoto", "Matsuda", "Nakajima", "Harada", "Tamura",
    "Takeuchi", "Kaneko", "Asahi", "Daiwa", "Fuji", "Hikari", "Sakura", "Toyo", "Kyowa", "Taiyo",
    "Chuo", "Tokai", "Sanwa", "Meiji", "Showa", "Heisei", "Kansai", "Kanto", "Kyushu",
];

pub(crate) const EN_FIRST: &[&str] = &[
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David",
    "Elizabeth", "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah",
    "Charles", "Karen", "Christopher", "Lisa", "Daniel", "Nancy", "Matthew", "Betty", "Anthony",
    "Margaret", "Mark", "Sandra", "Donald", "Ashley", "Steven", "Kimberly", "Paul", "Emily",
    "Andrew", "Donna", "Joshua", "Michelle", "Kenneth", "Carol", "Kevin", "Amanda", "Brian",
    "Melissa", "George", "Deborah", "Timothy", "Stephanie", "Ronald", "Rebecca", "Edward",
    "Sharon", "Jason", "Laura", "Jeffrey", "Cynthia", "Ryan", "Kathleen", "Jacob", "Amy", "Gary",
    "Angela", "Nicholas", "Shirley", "Eric", "Anna", "Jonathan", "Brenda", "Stephen", "Pamela",
    "Larry", "Emma", "Justin", "Nicole", "Scott", "Helen", "Brandon", "Samantha", "Benjamin",
    "Katherine", "Samuel", "Christine", "Gregory", "Rachel", "Frank", "Carolyn", "Patrick",
    "Janet", "Raymond", "Catherine", "Jack", "Maria", "Dennis", "Heather", "Jerry", "Diane",
    "Tyler", "Ruth", "Aaron", "Julie", "Olivia", "Adam", "Joyce", "Nathan", "Victoria", "Henry",
    "Kelly", "Douglas", "Lauren", "Peter", "Christina", "Kyle", "Joan", "Ethan", "Evelyn",
    "Walter", "Judith", "Noah", "Megan", "Jeremy", "Andrea", "Keith", "Hannah", "Roger", "Martha",
    "Gerald", "Gloria", "Harold", "Teresa", "Sean", "Austin", "Sara", "Carl", "Madison", "Arthur",
    "Frances", "Lawrence", "Kathryn", "Dylan", "Janice", "Jesse", "Abigail", "Bryan", "Alice",
    "Bruce", "Grace", "Gabriel", "Denise", "Logan", "Amber", "Albert", "Doris", "Alan",
    "Danielle", "Wayne", "Isabella", "Elijah", "Theresa", "Randy", "Diana", "Vincent", "Natalie",
    "Ralph", "Charlotte", "Eugene", "Marie", "Russell", "Philip", "Louis", "Oliver", "Sophia",
];

pub(crate) const EN_LAST: &[&str] = &[
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Miller", "Davis", "Wilson", "Anderson",
    "Taylor", "Thomas", "Moore", "Jackson", "Martin", "Lee", "Thompson", "White", "Harris",
    "Clark", "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright", "Scott", "Hill",
    "Green", "Adams", "Nelson", "Baker", "Hall", "Campbell", "Mitchell", "Carter", "Roberts",
    "Phillips", "Evans", "Turner", "Parker", "Collins", "Edwards", "Stewart", "Morris", "Murphy",
    "Cook", "Rogers", "Morgan", "Peterson", "Cooper", "Reed", "Bailey", "Bell", "Kelly", "Howard",
    "Ward", "Cox", "Richardson", "Wood", "Watson", "Brooks", "Bennett", "Gray", "James", "Hughes",
    "Price", "Sanders", "Myers", "Long", "Ross", "Foster", "Powell", "Jenkins", "Perry",
    "Russell", "Sullivan", "Fisher", "Henderson", "Coleman", "Simmons", "Patterson", "Jordan",
    "Reynolds", "Hamilton", "Graham", "Wallace", "Cole", "West", "Hayes", "Gibson", "Ellis",
    "Stevens", "Murray", "Ford", "Marshall", "Owens", "McDonald", "Harrison", "Kennedy", "Wells",
    "Dixon", "Robertson", "Black", "Daniels", "Palmer", "Mills", "Grant", "Knight", "Ferguson",
    "Rose", "Stone", "Hawkins", "Dunn", "Perkins", "Hudson", "Spencer", "Stephens", "Pierce",
    "Berry", "Matthews", "Arnold", "Wagner", "Willis", "Watkins", "Olson", "Carroll", "Duncan",
    "Snyder", "Hart", "Cunningham", "Bradley", "Lane", "Andrews", "Harper", "Fox", "Riley",
    "Armstrong", "Carpenter", "Weaver", "Greene", "Lawson", "Elliott", "Chambers", "Blake",
    "Quinn", "Whitaker", "Fletcher", "Holmes", "Barnes", "Lloyd", "Hunt", "Barker", "Chapman",
];

pub(crate) const DE_FIRST: &[&str] = &[
    "Jürgen", "Anna", "Klaus", "Sabine", "Stefan", "Petra", "Thomas", "Andrea", "Michael",
    "Claudia", "Wolfgang", "Monika", "Uwe", "Birgit", "Dieter", "Ursula", "Frank", "Karin",
    "Matthias", "Gabriele", "Jörg", "Renate", "Bernd", "Heike", "Helmut", "Susanne", "Günter",
    "Brigitte", "Horst", "Elke", "Ralf", "Christa", "Markus", "Martina", "Andreas", "Kerstin",
    "Torsten", "Anke", "Sven", "Katrin", "Lukas", "Lena", "Jonas", "Leonie", "Felix", "Hannah",
    "Maximilian", "Lea", "Tobias", "Julia", "Florian", "Sophie", "Sebastian", "Marie", "Tim",
    "Laura", "Niklas", "Johanna", "Björn", "Dörte", "Käthe", "Rüdiger", "Götz",
];

pub(crate) const FR_FIRST: &[&str] = &[
    "Hélène", "François", "Jean", "Marie", "Pierre", "Sophie", "Nicolas", "Isabelle", "Philippe",
    "Nathalie", "Michel", "Catherine", "Alain", "Sylvie", "Éric", "Valérie", "Laurent",
    "Christine", "Olivier", "Sandrine", "Thierry", "Véronique", "Stéphane", "Céline", "Frédéric",
    "Aurélie", "Sébastien", "Émilie", "Christophe", "Camille", "Julien", "Chloé", "Antoine",
    "Léa", "Mathieu", "Manon", "Guillaume", "Inès", "Benoît", "Margaux", "Jérôme", "Océane",
    "Rémi", "Zoé", "Hugo", "Élodie", "Théo", "Gaëlle", "Loïc", "Anaïs",
];

pub(crate) const ES_FIRST: &[&str] = &[
    "José", "María", "Antonio", "Carmen", "Manuel", "Josefa", "Francisco", "Isabel", "David",
    "Ana", "Juan", "Dolores", "Javier", "Pilar", "Daniel", "Teresa", "Carlos", "Rosa", "Jesús",
    "Cristina", "Alejandro", "Lucía", "Miguel", "Elena", "Rafael", "Laura", "Pedro", "Paula",
    "Pablo", "Marta", "Ángel", "Raquel", "Sergio", "Sara", "Fernando", "Silvia", "Jorge",
    "Patricia", "Luis", "Beatriz", "Alberto", "Nuria", "Álvaro", "Sofía", "Diego", "Alba",
    "Adrián", "Irene", "Raúl", "Begoña", "Íñigo", "Iñaki",
];

pub(crate) const JP_GIVEN: &[&str] = &[
    "Haruki", "Yuki", "Hiroshi", "Akiko", "Takashi", "Yoko", "Kenji", "Keiko", "Satoshi", "Naoko",
    "Daisuke", "Emi", "Kazuo", "Mariko", "Makoto", "Tomoko", "Shinji", "Yumi", "Takeshi",
    "Ayumi", "Koji", "Sachiko", "Masato", "Haruka", "Ryota", "Misaki", "Sho", "Nanami", "Yuto",
    "Aoi", "Ren", "Hina", "Kaito", "Yui", "Sota", "Rin", "Hinata", "Riku", "Daiki", "Mai",
    "Kenta", "Kaori", "Tsubasa", "Megumi", "Naoki", "Eri", "Hideo", "Akira", "Noriko", "Shota",
];

pub(crate) const JP_FAMILY: &[&str] = &[
    "Tanaka", "Yamamoto", "Suzuki", "Matsumoto", "Nakamura", "Kobayashi", "Fujimoto", "Hoshino",
    "Takeda", "Sato", "Watanabe", "Ito", "Kato", "Yoshida", "Yamada", "Sasaki", "Yamaguchi",
    "Inoue", "Kimura", "Hayashi", "Shimizu", "Yamazaki", "Mori", "Abe", "Ikeda", "Hashimoto",
    "Ishikawa", "Ogawa", "Okada", "Hasegawa", "Murakami", "Kondo", "Ishii", "Sakamoto", "Endo",
    "Aoki", "Fujii", "Nishimura", "Fukuda", "Ota", "Miura", "Okamoto", "Matsuda", "Nakajima",
    "Harada", "Ono", "Tamura", "Takeuchi", "Kaneko", "Wada", "Nakano", "Ueda", "Morita", "Hara",
    "Shibata", "Sakai", "Kudo", "Yokoyama", "Miyazaki", "Uchida", "Takagi", "Ando", "Taniguchi",
    "Maruyama", "Imai", "Takada", "Fujita",
];

pub(crate) const EN_LOC_MARKERS: &[&str] = &[
    "Street", "Avenue", "Park", "Harbour", "Station", "District", "Quarter", "Valley", "Bay",
];
pub(crate) const EN_DIRECTIONS: &[&str] = &["North", "South", "East", "West", "Upper", "Lower", "Old"];
pub(crate) const EN_LOC_STEMS: &[&str] = &[
    "Cedar", "Maple", "Oak", "Elm", "Willow", "Birch", "Cherry", "Chestnut", "Hazel", "Holly",
    "Ivy", "Laurel", "Magnolia", "Poplar", "Rowan", "Spruce", "King", "Queen", "Prince", "Duke",
    "Bishop", "Church", "Castle", "Abbey", "Bridge", "Market", "Mill", "Victoria", "Albert",
    "Wellington", "Nelson", "Cambridge", "Oxford", "Windsor", "York", "Kent", "Essex", "Devon",
    "Dorset", "Chelsea", "Camden", "Hudson", "Madison", "Lincoln", "Franklin", "Jefferson",
    "Monroe", "Canal", "Lake", "River", "Meadow", "Orchard", "Forest", "Sunset", "Highland",
    "Silver", "Golden", "Copper", "Hampton", "Brighton", "Clifton", "Fairview", "Greenwich",
    "Kensington", "Richmond", "Salisbury", "Somerset", "Stratford", "Tudor", "Wessex",
];
pub(crate) const EN_PLACE_WORDS: &[&str] = &[
    "Hill", "Brook", "Green", "Cross", "Gate", "Field", "Wood", "Ridge", "Lake", "Grove", "Heath",
    "Moor", "Vale", "Mead", "Ford", "Stone", "Water", "Dale", "Crest", "View",
];
pub(crate) const DE_LOC_STEMS: &[&str] = &[
    "Goethe", "Schiller", "Bismarck", "Linden", "Kastanien", "Rosen", "Berliner", "Hamburger",
    "Bahnhof", "Kirch", "Markt", "Schloss", "Garten", "Mühlen", "Brunnen", "Wald", "Berg",
    "Feld", "Eichen", "Birken", "Tannen", "Buchen", "Ahorn", "Kaiser", "König",
    "Friedrich", "Luisen", "Wilhelm", "Heine", "Lessing", "Mozart", "Beethoven", "Bach", "Kant",
    "Humboldt", "Leibniz", "Dürer", "Holbein", "Uhland", "Wieland", "Herder", "Fontane",
    "Sonnen", "Blumen", "Wiesen", "Dorf", "Schul", "Post", "Rathaus", "Hafenbecken",
];
pub(crate) const DE_CITIES: &[&str] = &[
    "Hamburg", "Bremen", "Kiel", "Rostock", "Lübeck", "Duisburg", "Mannheim", "Köln",
    "Düsseldorf", "Frankfurt", "München", "Stuttgart", "Dresden", "Leipzig", "Hannover",
    "Nürnberg", "Emden", "Wilhelmshaven", "Bremerhaven", "Regensburg",
];
pub(crate) const FR_PLACES: &[&str] = &[
    "Rivoli", "Lafayette", "Montmartre", "Provence", "Bretagne", "Normandie", "Lorraine",
    "Savoie", "Bourgogne", "Marseille", "Bordeaux", "Toulouse", "Nantes", "Grenoble",
    "Strasbourg", "Lyon", "Lille", "Rouen", "Reims", "Orléans", "Vendôme", "Trocadéro", "Grenelle",
    "Vaugirard", "Sèvres", "Châtelet", "Bercy", "Belleville", "Passy", "Auteuil",
];
pub(crate) const ES_PLACES: &[&str] = &[
    "Alcalá", "Serrano", "Goya", "Velázquez", "Cervantes", "Colón", "España", "Castilla",
    "Andalucía", "Valencia", "Sevilla", "Toledo", "Granada", "Murillo", "Zurbarán", "Sorolla",
    "Córdoba", "Málaga", "Zaragoza", "Bilbao", "Salamanca", "Cádiz", "Aragón", "Navarra",
    "Galicia", "Asturias", "Cataluña", "Extremadura", "Almería", "Huelva",
];
pub(crate) const JP_PLACES: &[&str] = &[
    "Shinagawa", "Shinjuku", "Shibuya", "Umeda", "Tenjin", "Minato", "Namba", "Ueno",
    "Ikebukuro", "Akihabara", "Ginza", "Roppongi", "Yokohama", "Kobe", "Nagoya", "Sendai",
    "Sapporo", "Fukuoka", "Hakata", "Kyoto", "Nara", "Osaka", "Chiba", "Kawasaki", "Omiya",
    "Kanazawa", "Niigata", "Okayama", "Hiroshima", "Kumamoto", "Kagoshima", "Naha", "Otaru",
    "Hakodate", "Matsuyama", "Takamatsu", "Shizuoka", "Hamamatsu", "Gifu", "Toyama",
];
pub(crate) const JP_PREFIXES: &[&str] = &["Shin", "Higashi", "Nishi", "Kita", "Minami", "Naka"];

pub(crate) const EN_BRANDS: &[&str] = &[
    "Vector", "Falcon", "Nova", "Atlas", "Orion", "Pulse", "Vertex", "Zenith", "Quantum", "Apex",
    "Titan", "Vortex", "Nimbus", "Stellar", "Fusion", "Horizon", "Matrix", "Photon", "Raptor",
    "Sonic", "Spectra", "Cobra", "Comet", "Echo", "Helix", "Lumen", "Mako", "Neon", "Onyx",
    "Prism", "Quasar", "Radian", "Sable", "Tango", "Velo", "Xenon", "Aurora", "Boreas", "Cygnus",
    "Draco",
];
pub(crate) const DE_BRANDS: &[&str] = &[
    "Blitz", "Adler", "Falke", "Donner", "Kraft", "Stahl", "Wolke", "Funke", "Sturm", "Licht",
    "Polar", "Kobold", "Greif", "Eiche", "Bergkristall", "Pfeil", "Zeppelin", "Kompass", "Anker",
    "Leuchte",
];
pub(crate) const FR_BRANDS: &[&str] = &[
    "Étoile", "Soleil", "Lumière", "Mistral", "Aigle", "Comète", "Orage", "Horizon", "Éclair",
    "Zéphyr", "Azur", "Cristal", "Flèche", "Vague", "Rubis", "Saphir", "Opale", "Plume", "Boréal",
    "Triton",
];
pub(crate) const ES_BRANDS: &[&str] = &[
    "Sol", "Luna", "Fuego", "Viento", "Cóndor", "Toro", "Río", "Cometa", "Rayo", "Brisa",
    "Estrella", "Faro", "Halcón", "Tesoro", "Volcán", "Ágata", "Trueno", "Nube", "Coral", "Alba",
];
pub(crate) const JP_BRANDS: &[&str] = &[
    "Hikari", "Kaze", "Sora", "Kumo", "Tsubasa", "Hayate", "Raiden", "Yume", "Hoshi", "Kagami",
    "Shizuku", "Inazuma", "Hayabusa", "Tsuki", "Asahi", "Nozomi", "Midori", "Kirin", "Tora",
    "Ryu",
];
