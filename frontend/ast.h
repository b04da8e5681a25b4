/* ast.h -- internal to the front end: the syntax tree of a .octo file as the parser builds it
 * (all nodes in one arena), and the parse entry point used by frontend.c and sema.c. */
#ifndef OCTO_FE_AST_H
#define OCTO_FE_AST_H

#include "ir.h"
#include "support.h"

/* Source span of a token or rule (the field names are the ones bison's default rules use). */
typedef struct fe_loc {
  uint32_t file;    /* diag source id */
  int first_line;   /* 1-based */
  int first_column; /* 1-based */
  int last_line;    /* line of the last character */
  int last_column;  /* column of the last character */
} fe_loc;

/* Diagnostic location of a span (single-line spans are underlined). */
diag_loc fe_diag_loc(fe_loc l);

typedef enum fe_value_kind {
  FE_V_NUMBER, /* number with optional unit */
  FE_V_IDENT,  /* bare name: enum value or reference */
  FE_V_STRING, /* quoted string */
  FE_V_BOOL,   /* true / false */
  FE_V_LINK,   /* link { ... } */
  FE_V_LIST    /* [ value, ... ] */
} fe_value_kind;

typedef struct fe_assign fe_assign;

/* A number token as the lexer reads it. */
typedef struct fe_num {
  double num;               /* value in base units (unit scale applied) */
  double mantissa;          /* the written number */
  bool integral;            /* written without '.' or exponent */
  const ir_unit_info *unit; /* unit after it, or NULL */
  const char *text;         /* the written text, unit included */
  size_t num_len;           /* the number's length in it (the unit follows) */
  bool bad;                 /* the lexer reported it (unknown unit, out of range) */
} fe_num;

/* The right-hand side of an assignment. */
typedef struct fe_value {
  fe_value_kind kind;       /* which of the fields below is meaningful */
  fe_loc loc;               /* span of the whole value */
  fe_num number;            /* FE_V_NUMBER: the number */
  const char *str;          /* FE_V_IDENT / FE_V_STRING: text */
  bool boolean;             /* FE_V_BOOL */
  fe_assign *fields;        /* FE_V_LINK: its assignments */
  struct fe_elem *elems;    /* FE_V_LIST: its elements, in order */
} fe_value;

/* One element of a list value. */
typedef struct fe_elem {
  fe_value val;          /* the element */
  struct fe_elem *next;  /* next element */
} fe_elem;

/* key = value */
struct fe_assign {
  const char *key; /* left-hand side */
  fe_loc key_loc;  /* its span */
  fe_value val;    /* right-hand side */
  fe_assign *next; /* next in the list */
};

typedef enum fe_item_kind {
  FE_I_ASSIGN,  /* model-level dimension */
  FE_I_LAYER,   /* layer NAME : KIND { ... } */
  FE_I_REPEAT,  /* repeat N { ... } */
  FE_I_USE,     /* use BLOCK */
  FE_I_PATTERN  /* pattern "..." { letter = target ... } */
} fe_item_kind;

/* One definition of a pattern letter. */
typedef struct fe_letter {
  char letter;         /* the letter */
  fe_loc loc;          /* span of the letter */
  const char *target;  /* layer kind or block name */
  fe_loc target_loc;   /* its span */
  fe_assign *params;   /* parameters for a kind target */
  bool seen;           /* sema: already instantiated once (explain and check only once) */
  struct fe_letter *next; /* next definition */
} fe_letter;

/* An entry of a model or block body. */
typedef struct fe_item {
  fe_item_kind kind;    /* which fields below are meaningful */
  fe_loc loc;           /* span of the statement's keyword or key */
  fe_assign *assign;    /* FE_I_ASSIGN */
  const char *name;     /* FE_I_LAYER: layer name; FE_I_USE: block name */
  fe_loc name_loc;      /* span of name */
  const char *kind_name; /* FE_I_LAYER: kind spelled */
  fe_loc kind_loc;      /* its span */
  fe_assign *params;    /* FE_I_LAYER: parameters */
  double count;         /* FE_I_REPEAT: repetitions as written (-1: not a plain whole number) */
  const char *count_text; /* FE_I_REPEAT: the count's text */
  fe_loc count_loc;     /* its span */
  struct fe_item *body; /* FE_I_REPEAT: repeated items */
  const char *pattern;  /* FE_I_PATTERN: the letter string */
  fe_loc pattern_loc;   /* its span (column of the opening quote) */
  fe_letter *letters;   /* FE_I_PATTERN: definitions */
  bool seen;            /* sema: already instantiated once (explain and check only once) */
  struct fe_item *next; /* next item */
} fe_item;

typedef enum fe_stmt_kind {
  FE_S_IMPORT, FE_S_PROFILE, FE_S_MODEL, FE_S_BLOCK, FE_S_DEVICE, FE_S_CLUSTER, FE_S_TRAIN
} fe_stmt_kind;

/* A top-level statement. */
typedef struct fe_stmt {
  fe_stmt_kind kind;     /* which fields below are meaningful */
  fe_loc loc;            /* span of the keyword */
  const char *name;      /* model/block/device/cluster name; import/profile path */
  fe_loc name_loc;       /* its span */
  fe_item *items;        /* model/block body */
  fe_assign *assigns;    /* device/cluster/train body */
  struct fe_stmt *next;  /* next statement */
} fe_stmt;

/* The deepest nesting of '{' and '[' a source may have (docs/language.md, "Limits"): deeper
 * input stops the parse with a located error instead of exhausting the parser's stack. */
#define FE_MAX_NESTING 256

/* State shared by the lexer and the parser of one source. */
typedef struct fe_parser {
  diag_engine *d;  /* diagnostics */
  arena *a;        /* node storage */
  uint32_t file;   /* source id */
  int line, col;   /* lexer position of the next character */
  fe_stmt *stmts;  /* result: statements in order */
  int syntax_errors; /* syntax errors reported by the parser (and the nesting error) */
  int depth;       /* '{' and '[' open at the lexer's position */
  bool stopped;    /* the lexer ended the input early (too deep): later syntax errors are not
                      reported */
} fe_parser;

/* Parse source 'file' of d into statements allocated in 'a'. Returns the statement list (NULL
 * when empty); errors are reported through d. *syntax_errors receives the number of syntax
 * errors (after which the tree is incomplete); lexical errors leave a complete tree whose bad
 * numbers are marked. */
fe_stmt *fe_parse(diag_engine *d, arena *a, uint32_t file, int *syntax_errors);

#endif
