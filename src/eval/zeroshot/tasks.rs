//! The seven zero-shot tasks of the Wanda paper's Table 2, each exactly as lm-evaluation-harness
//! 0.4.13 defines it (`lm_eval/tasks/<task>/*.yaml` and their `utils.py`): the data set, the
//! split scored, `doc_to_text`, `doc_to_choice`, `doc_to_target`, the target delimiter " ", and
//! HellaSwag's and WinoGrande's preprocessing.
//!
//! | task | repository, config, split | prompt | choices |
//! |---|---|---|---|
//! | `boolq` | `aps/super_glue` `boolq` validation | `{passage}\nQuestion: {question}?\nAnswer:` | ` no`, ` yes` |
//! | `rte` | `nyu-mll/glue` `rte` validation | `{sentence1}\nQuestion: {sentence2} True or False?\nAnswer:` | ` True`, ` False` |
//! | `hellaswag` | `Rowan/hellaswag` `default` validation | `preprocess(activity_label: ctx_a Ctx_b)` | ` preprocess(ending)` |
//! | `winogrande` | `allenai/winogrande` `winogrande_xl` validation | `sentence[..'_'] + option` (one context per option) | ` sentence['_'+1..].strip()` (shared) |
//! | `arc_easy` | `allenai/ai2_arc` `ARC-Easy` test | `Question: {question}\nAnswer:` | ` choices.text[i]` |
//! | `arc_challenge` | `allenai/ai2_arc` `ARC-Challenge` test | as `arc_easy` | as `arc_easy` |
//! | `openbookqa` | `allenai/openbookqa` `main` test | `{question_stem}` | ` choices.text[i]` |

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::data::records::Record;

/// lm-evaluation-harness release whose task definitions these are.
pub const LM_EVAL_VERSION: &str = "0.4.13";

/// A zero-shot task.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
    clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Task {
    /// BoolQ: yes/no questions about a passage.
    Boolq,
    /// RTE: textual entailment, True/False.
    Rte,
    /// HellaSwag: the most plausible continuation of an activity description.
    Hellaswag,
    /// WinoGrande: which option fills the blank (scored on the shared rest of the sentence).
    Winogrande,
    /// ARC-Easy: grade-school science questions.
    ArcEasy,
    /// ARC-Challenge: the hard ARC questions.
    ArcChallenge,
    /// OpenBookQA: elementary science questions.
    Openbookqa,
}

/// Where a task's documents are on the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskData {
    /// The data-set repository.
    pub repo: &'static str,
    /// Its configuration (subset) folder.
    pub config: &'static str,
    /// The split scored: lm-eval's `test_split`, else its `validation_split`.
    pub split: &'static str,
}

/// One document made into loglikelihood requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// `(context, continuation)` per choice, in choice order.
    pub requests: Vec<(String, String)>,
    /// lm-eval's `doc_to_choice` (the continuations without the delimiter; WinoGrande's
    /// contexts): `acc_norm` divides each loglikelihood by its length in characters.
    pub choices: Vec<String>,
    /// The index of the right choice.
    pub gold: usize,
}

/// lm-eval's `target_delimiter`.
const DELIMITER: &str = " ";

impl Task {
    /// All seven, in the paper's column order.
    pub const ALL: [Task; 7] = [
        Task::Boolq,
        Task::Rte,
        Task::Hellaswag,
        Task::Winogrande,
        Task::ArcEasy,
        Task::ArcChallenge,
        Task::Openbookqa,
    ];

    /// lm-eval's task name.
    pub fn name(self) -> &'static str {
        match self {
            Task::Boolq => "boolq",
            Task::Rte => "rte",
            Task::Hellaswag => "hellaswag",
            Task::Winogrande => "winogrande",
            Task::ArcEasy => "arc_easy",
            Task::ArcChallenge => "arc_challenge",
            Task::Openbookqa => "openbookqa",
        }
    }

    /// The task's YAML within lm-eval's `tasks` folder.
    pub fn lm_eval_yaml(self) -> &'static str {
        match self {
            Task::Boolq => "super_glue/boolq/default.yaml",
            Task::Rte => "glue/rte/default.yaml",
            Task::Hellaswag => "hellaswag/hellaswag.yaml",
            Task::Winogrande => "winogrande/default.yaml",
            Task::ArcEasy => "arc/arc_easy.yaml",
            Task::ArcChallenge => "arc/arc_challenge.yaml",
            Task::Openbookqa => "openbookqa/openbookqa.yaml",
        }
    }

    /// The data set, configuration and split scored.
    pub fn data(self) -> TaskData {
        let (repo, config, split) = match self {
            Task::Boolq => ("aps/super_glue", "boolq", "validation"),
            Task::Rte => ("nyu-mll/glue", "rte", "validation"),
            Task::Hellaswag => ("Rowan/hellaswag", "default", "validation"),
            Task::Winogrande => ("allenai/winogrande", "winogrande_xl", "validation"),
            Task::ArcEasy => ("allenai/ai2_arc", "ARC-Easy", "test"),
            Task::ArcChallenge => ("allenai/ai2_arc", "ARC-Challenge", "test"),
            Task::Openbookqa => ("allenai/openbookqa", "main", "test"),
        };
        TaskData {
            repo,
            config,
            split,
        }
    }

    /// Whether lm-eval reports `acc_norm` for the task (its `metric_list`).
    pub fn has_acc_norm(self) -> bool {
        matches!(
            self,
            Task::Hellaswag | Task::ArcEasy | Task::ArcChallenge | Task::Openbookqa
        )
    }

    /// The requests, choices and gold index of one document, or what is wrong with it.
    pub fn document(self, doc: &Record) -> Result<Document, String> {
        let continuations = |context: String, choices: Vec<String>, gold: usize| Document {
            requests: choices
                .iter()
                .map(|c| (context.clone(), format!("{DELIMITER}{c}")))
                .collect(),
            choices,
            gold,
        };
        let document = match self {
            Task::Boolq => continuations(
                format!(
                    "{}\nQuestion: {}?\nAnswer:",
                    text(doc, "passage")?,
                    text(doc, "question")?
                ),
                vec!["no".into(), "yes".into()],
                index(doc, "label")?,
            ),
            Task::Rte => continuations(
                format!(
                    "{}\nQuestion: {} True or False?\nAnswer:",
                    text(doc, "sentence1")?,
                    text(doc, "sentence2")?
                ),
                vec!["True".into(), "False".into()],
                index(doc, "label")?,
            ),
            Task::Hellaswag => {
                let context = format!(
                    "{}: {} {}",
                    text(doc, "activity_label")?,
                    text(doc, "ctx_a")?,
                    py_capitalize(text(doc, "ctx_b")?)
                );
                let endings = texts(doc, "endings")?;
                continuations(
                    hellaswag_preprocess(&context),
                    endings.iter().map(|e| hellaswag_preprocess(e)).collect(),
                    index(doc, "label")?,
                )
            }
            Task::Winogrande => {
                let sentence = text(doc, "sentence")?;
                let blank = sentence
                    .find('_')
                    .ok_or("`sentence` has no `_` blank to fill")?;
                let contexts: Vec<String> = [text(doc, "option1")?, text(doc, "option2")?]
                    .iter()
                    .map(|option| format!("{}{option}", &sentence[..blank]))
                    .collect();
                let target = py_strip(&sentence[blank + 1..]);
                let gold = match text(doc, "answer")? {
                    "1" => 0,
                    "2" => 1,
                    other => return Err(format!("`answer` is {other:?}, not \"1\" or \"2\"")),
                };
                Document {
                    requests: contexts
                        .iter()
                        .map(|c| (c.clone(), format!("{DELIMITER}{target}")))
                        .collect(),
                    choices: contexts,
                    gold,
                }
            }
            Task::ArcEasy | Task::ArcChallenge | Task::Openbookqa => {
                let context = if self == Task::Openbookqa {
                    text(doc, "question_stem")?.to_owned()
                } else {
                    format!("Question: {}\nAnswer:", text(doc, "question")?)
                };
                let choices = doc.get("choices").ok_or("it has no `choices`")?;
                let key = text(doc, "answerKey")?;
                let key = if self == Task::Openbookqa {
                    key.trim_start_matches(py_isspace)
                } else {
                    key
                };
                let labels = strings(choices.get("label"), "choices.label")?;
                let gold = labels.iter().position(|l| l == key).ok_or_else(|| {
                    format!("`answerKey` {key:?} is not one of `choices.label` {labels:?}")
                })?;
                continuations(context, strings(choices.get("text"), "choices.text")?, gold)
            }
        };
        if document.gold >= document.choices.len() {
            return Err(format!(
                "the gold index {} is outside its {} choices",
                document.gold,
                document.choices.len()
            ));
        }
        Ok(document)
    }
}

/// The string column `key`.
fn text<'a>(doc: &'a Record, key: &str) -> Result<&'a str, String> {
    match doc.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("`{key}` is {other}, not a string")),
        None => Err(format!("it has no `{key}`")),
    }
}

/// The list-of-strings column `key`.
fn texts(doc: &Record, key: &str) -> Result<Vec<String>, String> {
    strings(doc.get(key), key)
}

/// `value` as a list of strings.
fn strings(value: Option<&Value>, key: &str) -> Result<Vec<String>, String> {
    let Some(Value::Array(items)) = value else {
        return Err(format!("`{key}` is missing or not a list"));
    };
    items
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!("`{key}` holds {other}, not a string")),
        })
        .collect()
}

/// A gold index: an integer, or a string of digits (HellaSwag's `label`), as lm-eval renders
/// `doc_to_target` and reads a digit string back as an integer.
fn index(doc: &Record, key: &str) -> Result<usize, String> {
    match doc.get(key) {
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("`{key}` is {n}, not an index")),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse().map_err(|_| format!("`{key}` {s:?} is too large"))
        }
        Some(other) => Err(format!(
            "`{key}` is {other}, not an index (an unlabelled test split?)"
        )),
        None => Err(format!("it has no `{key}`")),
    }
}

/// Python's `str.isspace` for one character: Unicode white space plus the ASCII information
/// separators U+001C–U+001F, which Python counts and Rust's `char::is_whitespace` does not.
pub fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(py_isspace)
}

/// Python's `str.capitalize()`: the first character upper-cased, every other lower-cased.
/// (Python title-cases the first character, which differs from upper case only for the four
/// digraphs such as `ǆ`.)
fn py_capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.as_str().to_lowercase().chars())
            .collect(),
        None => String::new(),
    }
}

/// HellaSwag's `preprocess` (lm-eval `tasks/hellaswag/utils.py`): strip, `" [title]"` → `". "`,
/// every `[…]` on one line removed (the regex `\[.*?\]`), then `"  "` → `" "` once, left to
/// right.
fn hellaswag_preprocess(text: &str) -> String {
    let text = py_strip(text).replace(" [title]", ". ");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        // `.` does not match a newline: the bracket must close before the line ends.
        match after.find([']', '\n']) {
            Some(end) if after.as_bytes()[end] == b']' => rest = &after[end + 1..],
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace("  ", " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(value: Value) -> Record {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    #[test]
    fn boolq_by_hand() {
        let doc = Task::Boolq
            .document(&record(json!({
                "passage": "Cats purr.", "question": "do cats purr", "label": 1, "idx": 0
            })))
            .unwrap();
        let context = "Cats purr.\nQuestion: do cats purr?\nAnswer:".to_owned();
        assert_eq!(
            doc.requests,
            vec![(context.clone(), " no".into()), (context, " yes".into())]
        );
        assert_eq!(doc.gold, 1);
    }

    #[test]
    fn rte_by_hand() {
        let doc = Task::Rte
            .document(&record(json!({
                "sentence1": "A dog ran.", "sentence2": "An animal ran.", "label": 0
            })))
            .unwrap();
        assert_eq!(
            doc.requests[1],
            (
                "A dog ran.\nQuestion: An animal ran. True or False?\nAnswer:".into(),
                " False".into()
            )
        );
        assert_eq!((doc.gold, doc.choices.len()), (0, 2));
    }

    #[test]
    fn hellaswag_preprocessing_by_hand() {
        // " [title]" → ". ", brackets removed, ctx_b capitalised (rest lower-cased), "  " → " ".
        let doc = Task::Hellaswag
            .document(&record(json!({
                "activity_label": "Home [header] and Garden",
                "ctx_a": "How to plant [title] a Tree.",
                "ctx_b": "then DIG a hole",
                "endings": [" Water it  well. [step] ", "Unclosed [bracket\n] stays"],
                "label": "1"
            })))
            .unwrap();
        assert_eq!(
            doc.requests[0].0,
            "Home and Garden: How to plant. a Tree. Then dig a hole"
        );
        assert_eq!(
            doc.choices,
            vec!["Water it well. ", "Unclosed [bracket\n] stays"]
        );
        assert_eq!(doc.requests[0].1, " Water it well. ");
        assert_eq!(doc.gold, 1);
    }

    #[test]
    fn winogrande_contexts_vary_and_the_continuation_is_shared() {
        let doc = Task::Winogrande
            .document(&record(json!({
                "sentence": "Sarah lent Maria a book because _ had two copies. ",
                "option1": "Sarah", "option2": "Maria", "answer": "1"
            })))
            .unwrap();
        assert_eq!(
            doc.requests,
            vec![
                (
                    "Sarah lent Maria a book because Sarah".into(),
                    " had two copies.".into()
                ),
                (
                    "Sarah lent Maria a book because Maria".into(),
                    " had two copies.".into()
                ),
            ]
        );
        assert_eq!(doc.choices[1], "Sarah lent Maria a book because Maria");
        assert_eq!(doc.gold, 0);
    }

    #[test]
    fn arc_and_openbookqa_by_hand() {
        let arc = record(json!({
            "question": "What melts ice?",
            "choices": {"text": ["heat", "cold", "dark"], "label": ["1", "2", "3"]},
            "answerKey": "1"
        }));
        let doc = Task::ArcChallenge.document(&arc).unwrap();
        assert_eq!(
            doc.requests[2],
            ("Question: What melts ice?\nAnswer:".into(), " dark".into())
        );
        assert_eq!(doc.gold, 0);
        let obqa = record(json!({
            "question_stem": "The sun is a",
            "choices": {"text": ["star", "planet"], "label": ["A", "B"]},
            "answerKey": " A"
        }));
        let doc = Task::Openbookqa.document(&obqa).unwrap();
        assert_eq!(doc.requests[0], ("The sun is a".into(), " star".into()));
        assert_eq!(doc.gold, 0);
        // ARC does not strip its key: " A" is no label there.
        let mut arc_spaced = obqa.clone();
        arc_spaced.insert("question".into(), json!("Q"));
        let err = Task::ArcEasy.document(&arc_spaced).unwrap_err();
        assert!(err.contains("answerKey"), "{err}");
    }

    #[test]
    fn bad_documents_say_what_is_wrong() {
        let err = Task::Boolq
            .document(&record(json!({"passage": "p", "question": "q"})))
            .unwrap_err();
        assert!(err.contains("`label`"), "{err}");
        let err = Task::Hellaswag
            .document(&record(json!({
                "activity_label": "a", "ctx_a": "b", "ctx_b": "c", "endings": ["x"], "label": ""
            })))
            .unwrap_err();
        assert!(err.contains("unlabelled"), "{err}");
        let err = Task::Rte
            .document(&record(
                json!({"sentence1": "a", "sentence2": "b", "label": 2}),
            ))
            .unwrap_err();
        assert!(err.contains("outside"), "{err}");
        let err = Task::Winogrande
            .document(&record(json!({
                "sentence": "no blank", "option1": "a", "option2": "b", "answer": "1"
            })))
            .unwrap_err();
        assert!(err.contains("blank"), "{err}");
    }

    #[test]
    fn python_string_helpers() {
        assert_eq!(py_capitalize("éCOLE der"), "École der");
        assert_eq!(py_capitalize(""), "");
        assert_eq!(py_strip("\u{1f} a \u{a0}"), "a");
        assert_eq!(hellaswag_preprocess("a   b"), "a  b");
        assert_eq!(hellaswag_preprocess("x [a] [b] y"), "x  y");
    }
}
